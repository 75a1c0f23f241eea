-- Webhook deliveries that lose nothing (issue 35): one row per alert sent by webhook, alive
-- until it is delivered or dead (or, dead, discarded by an operator), and one circuit per endpoint.

-- A delivery's id is its alert's id: the X-Ermis-Delivery-Id of every attempt. The endpoint is
-- not copied here (it can be a credential): each attempt reads it from the tenant's rule.
CREATE TABLE webhook_deliveries (
    id text PRIMARY KEY,
    tenant_scope_id text NOT NULL,
    rule_id text NOT NULL,
    payload jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead', 'discarded')),
    attempts int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz,
    last_code int,
    last_detail text,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
-- What is due (the tick's backstop) and what is dead (the operations console).
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_dead_idx ON webhook_deliveries (finished_at DESC, id DESC) WHERE status = 'dead';

-- An endpoint that keeps failing is paused: keyed by a digest of its URL, never the URL.
CREATE TABLE webhook_circuits (
    endpoint_digest text PRIMARY KEY,
    consecutive_failures int NOT NULL DEFAULT 0,
    opened int NOT NULL DEFAULT 0,
    open_until timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
