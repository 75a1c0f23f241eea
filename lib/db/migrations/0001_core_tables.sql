-- The tables of CONTRACTS §6, with the indexes their queries need.

-- Postgres KV store. Reads ignore expired rows; the state cleanup cron deletes them.
CREATE TABLE platform_state (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    expires_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX platform_state_expires_at_idx ON platform_state (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX platform_state_key_prefix_idx ON platform_state (key text_pattern_ops);

CREATE TABLE platform_state_hash (
    key text NOT NULL,
    field text NOT NULL,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, field)
);
CREATE INDEX platform_state_hash_prefix_age_idx ON platform_state_hash (key text_pattern_ops, updated_at);

-- AI usage accounting: the ledger (idempotent on the client-supplied id) and the Polar outbox.
CREATE TABLE ai_usage_ledger (
    id text PRIMARY KEY,
    tenant_scope_id text,
    user_id text,
    model text,
    input_tokens int,
    output_tokens int,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ai_usage_ledger_tenant_idx ON ai_usage_ledger (tenant_scope_id, created_at);
CREATE INDEX ai_usage_ledger_user_idx ON ai_usage_ledger (user_id);

CREATE TABLE ai_usage_metering_outbox (
    id bigserial PRIMARY KEY,
    event jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processed', 'failed')),
    attempt_count int NOT NULL DEFAULT 0,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz
);
CREATE INDEX ai_usage_metering_outbox_eligible_idx ON ai_usage_metering_outbox (id)
    WHERE status IN ('pending', 'failed');

-- GDPR erasure requests.
CREATE TABLE data_erasure_requests (
    id uuid PRIMARY KEY,
    subject_user_id text NOT NULL,
    status text NOT NULL CHECK (status IN ('pending', 'cancelled', 'purged')),
    requested_at timestamptz NOT NULL,
    grace_ends_at timestamptz NOT NULL,
    purged_at timestamptz
);
CREATE INDEX data_erasure_requests_due_idx ON data_erasure_requests (grace_ends_at) WHERE status = 'pending';
CREATE INDEX data_erasure_requests_subject_idx ON data_erasure_requests (subject_user_id);

-- Editorial drafts: what the feed shows and what the feed/story streams watch.
CREATE TABLE editorial_story_drafts (
    id text PRIMARY KEY,
    tenant_scope_id text NOT NULL,
    story_id text NOT NULL,
    headline text NOT NULL,
    summary text,
    status text NOT NULL CHECK (status IN ('review', 'published')),
    phase text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_scope_id, story_id)
);
CREATE INDEX editorial_story_drafts_tenant_updated_idx ON editorial_story_drafts (tenant_scope_id, updated_at DESC);
CREATE INDEX editorial_story_drafts_story_idx ON editorial_story_drafts (story_id);

-- What the notification stream reads.
CREATE TABLE notifications (
    id text PRIMARY KEY,
    user_id text NOT NULL,
    tenant_scope_id text,
    title text,
    body text,
    type text NOT NULL,
    read boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notifications_user_created_idx ON notifications (user_id, created_at DESC);

CREATE TABLE alert_history (
    id text PRIMARY KEY,
    tenant_scope_id text NOT NULL,
    rule_id text,
    story_id text NOT NULL,
    title text,
    severity text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    channel text NOT NULL CHECK (channel IN ('in-app', 'email', 'webhook')),
    delivered_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_history_tenant_delivered_idx ON alert_history (tenant_scope_id, delivered_at DESC);
-- One alert per (tenant, rule, story): re-evaluating the same stories never alerts twice.
CREATE UNIQUE INDEX alert_history_rule_story_idx ON alert_history (tenant_scope_id, rule_id, story_id);

CREATE TABLE review_status_events (
    id text PRIMARY KEY,
    tenant_scope_id text,
    story_id text NOT NULL,
    headline text,
    action text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX review_status_events_changed_idx ON review_status_events (changed_at DESC);
CREATE INDEX review_status_events_tenant_changed_idx ON review_status_events (tenant_scope_id, changed_at DESC);

CREATE TABLE delivery_logs (
    id text PRIMARY KEY,
    delivery_id text NOT NULL,
    tenant_scope_id text NOT NULL,
    method text NOT NULL,
    response_code int NOT NULL,
    endpoint text,
    status text NOT NULL CHECK (status IN ('delivered', 'failed')),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX delivery_logs_failed_idx ON delivery_logs (tenant_scope_id, created_at DESC) WHERE status = 'failed';

-- Sources: catalogs of feeds, and the newsroom profile that picks one per tenant.
CREATE TABLE source_sets (
    key text PRIMARY KEY,
    feeds jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE newsroom_profiles (
    tenant_scope_id text PRIMARY KEY,
    status text NOT NULL CHECK (status IN ('draft', 'completed')),
    source_set_key text NOT NULL REFERENCES source_sets (key),
    content_locale text NOT NULL DEFAULT 'en',
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX newsroom_profiles_completed_idx ON newsroom_profiles (tenant_scope_id) WHERE status = 'completed';

INSERT INTO source_sets (key, feeds) VALUES ('default', '[]'::jsonb);
