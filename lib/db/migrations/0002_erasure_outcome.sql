-- What a purge did, per table, and when a request was cancelled (the erasure runbook's audit trail).
ALTER TABLE data_erasure_requests
    ADD COLUMN purge_counts jsonb,
    ADD COLUMN cancelled_at timestamptz;
