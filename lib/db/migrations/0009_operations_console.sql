-- The operations console (issue 11).

-- Every cron invocation: scheduled GET, operator POST, and a duplicate that found its job
-- running ('skipped'). A run inserts 'running' and is finished to 'succeeded' or 'failed'.
CREATE TABLE cron_runs (
    id bigserial PRIMARY KEY,
    job text NOT NULL,
    trigger text NOT NULL CHECK (trigger IN ('schedule', 'operator')),
    started_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    status text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'skipped')),
    duration_ms int,
    http_status int,
    summary jsonb,
    error text
);
CREATE INDEX cron_runs_job_started_idx ON cron_runs (job, started_at DESC);
CREATE INDEX cron_runs_started_idx ON cron_runs (started_at);

-- The watchdog's memory: the last success of each job whose staleness was already reported,
-- so one stale episode is reported once (a new episode has a different last success).
CREATE TABLE cron_stale_reports (
    job text PRIMARY KEY,
    last_success_at timestamptz,
    reported_at timestamptz NOT NULL DEFAULT now()
);

-- Operator actions on stuck work (and flag changes): who, what, which entries, the outcome.
CREATE TABLE ops_audit_log (
    id bigserial PRIMARY KEY,
    actor text NOT NULL,
    action text NOT NULL,
    source text NOT NULL,
    target_ids jsonb NOT NULL,
    reason text,
    outcome jsonb NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ops_audit_log_at_idx ON ops_audit_log (at DESC, id DESC);

-- Queue telemetry, written by the consumer wrapper with each delivery (one statement). A topic
-- has SHARDS rows, a delivery updating one at random, so concurrent deliveries of one topic do
-- not queue behind a single row lock; readers sum them.
CREATE TABLE queue_topic_telemetry (
    topic text NOT NULL,
    shard smallint NOT NULL,
    published bigint NOT NULL DEFAULT 0,
    deliveries bigint NOT NULL DEFAULT 0,
    successes bigint NOT NULL DEFAULT 0,
    retries bigint NOT NULL DEFAULT 0,
    dead_letters bigint NOT NULL DEFAULT 0,
    rejected bigint NOT NULL DEFAULT 0,
    last_success_at timestamptz,
    last_failure_at timestamptz,
    last_error text,
    last_delivery_at timestamptz,
    last_delivery_age_ms bigint,
    PRIMARY KEY (topic, shard)
);

-- A dead letter an operator acted on leaves the list but keeps its row (and who did what).
ALTER TABLE queue_dead_letters
    ADD COLUMN resolution text CHECK (resolution IN ('redriven', 'deleted')),
    ADD COLUMN resolved_at timestamptz,
    ADD COLUMN resolved_by text;
CREATE INDEX queue_dead_letters_open_idx ON queue_dead_letters (failed_at DESC, id DESC) WHERE resolution IS NULL;

-- A metering row an operator gave up on: kept for the record, never sent. last_attempt_at
-- dates a failure (the console lists exhausted rows by it).
ALTER TABLE ai_usage_metering_outbox ADD COLUMN last_attempt_at timestamptz;
ALTER TABLE ai_usage_metering_outbox DROP CONSTRAINT ai_usage_metering_outbox_status_check;
ALTER TABLE ai_usage_metering_outbox
    ADD CONSTRAINT ai_usage_metering_outbox_status_check CHECK (status IN ('pending', 'processed', 'failed', 'discarded'));
