-- A purge is verified before its request is called purged (issue 42): after the deletions, every
-- place the person's data lives is read again by value; anything left makes the request 'failed'
-- with what was found (place -> count) in `leftovers`, and the purge cron tries it again.
ALTER TABLE data_erasure_requests DROP CONSTRAINT data_erasure_requests_status_check;
ALTER TABLE data_erasure_requests
    ADD CONSTRAINT data_erasure_requests_status_check CHECK (status IN ('pending', 'cancelled', 'purged', 'failed')),
    ADD COLUMN leftovers jsonb,
    ADD COLUMN verified_at timestamptz;
DROP INDEX data_erasure_requests_due_idx;
CREATE INDEX data_erasure_requests_due_idx ON data_erasure_requests (grace_ends_at) WHERE status IN ('pending', 'failed');
