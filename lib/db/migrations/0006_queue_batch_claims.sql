-- One row per (topic, batch) a queue consumer has started: the claim that makes duplicate and
-- replayed deliveries do the work once. 'running' holds a lease until lease_until; 'released'
-- (the run failed) and an expired lease can be claimed again; 'done' never runs again.
CREATE TABLE queue_batch_claims (
    topic text NOT NULL,
    batch_id text NOT NULL,
    status text NOT NULL CHECK (status IN ('running', 'released', 'done')),
    claim_token uuid NOT NULL,
    lease_until timestamptz NOT NULL,
    runs int NOT NULL DEFAULT 1,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (topic, batch_id)
);
CREATE INDEX queue_batch_claims_finished_idx ON queue_batch_claims (finished_at);
