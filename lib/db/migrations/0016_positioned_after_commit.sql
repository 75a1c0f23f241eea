-- Writers only record the change (issue 36). Until now a writer's transaction paid for the
-- streams twice at commit: pg_notify (0010/0011), which takes a cluster-wide lock through the
-- commit record's flush so every notifying commit in the database waits for every other one, and
-- the deferred positioning trigger (0012), which took an advisory lock per channel so one hot
-- channel (a tenant's alerts, 'review|*') serialised its writers' commits.
--
-- Now a writer only inserts its stream_changes rows (position NULL), taking no lock any other
-- writer takes. Positions are drawn after commit by ermis_position_changes(), called by one
-- process of the deployment at a time (lib.streams.detector) and by a read that needs every
-- committed row positioned (lib.streams.positioner). It sees committed rows only, so an open
-- transaction anywhere holds no stream back, and it runs under one advisory lock held until its
-- own commit is visible: rounds never overlap, each round's positions are above every earlier
-- round's, and they all become visible at once. Within a channel, then, nothing can become
-- visible below a position a reader has passed — the guarantee 0012 gave, without the writers.
DROP TRIGGER alert_history_notify ON alert_history;
DROP TRIGGER delivery_logs_notify ON delivery_logs;
DROP TRIGGER review_status_events_notify ON review_status_events;
DROP TRIGGER notifications_notify ON notifications;
DROP TRIGGER editorial_story_drafts_notify ON editorial_story_drafts;
DROP FUNCTION ermis_notify_change();

DROP TRIGGER stream_changes_position ON stream_changes;
DROP FUNCTION ermis_position_stream_changes();

-- The rows still to position, oldest first (xid only served the commit-time trigger).
ALTER TABLE stream_changes DROP COLUMN xid;
CREATE INDEX stream_changes_unpositioned_id_idx ON stream_changes (id) WHERE position IS NULL;

-- One round: position up to batch_size committed rows, oldest logged first, and answer each
-- channel that advanced with its new head and how many of its rows were positioned. Nothing to do costs one probe of the partial index, no
-- lock and no transaction id (no commit record to flush).
CREATE FUNCTION ermis_position_changes(batch_size int) RETURNS TABLE (channel text, head bigint, moved int)
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM stream_changes WHERE position IS NULL) THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(1163022163, 1347375956);  -- 'ERMS', 'POST': the positioner's lock
    -- A new statement, a new snapshot: it sees what the round before this one committed.
    RETURN QUERY
    WITH drawn AS (
        SELECT mine.id, nextval('stream_position_seq') AS position
        FROM (SELECT s.id FROM stream_changes s WHERE s.position IS NULL ORDER BY s.id LIMIT batch_size) mine
    ), positioned AS (
        UPDATE stream_changes c SET position = drawn.position
        FROM drawn WHERE c.id = drawn.id AND c.position IS NULL
        RETURNING c.channel, c.position
    )
    SELECT p.channel, max(p.position), count(*)::int FROM positioned p GROUP BY p.channel;
END
$$;

-- Committed before this migration and still unpositioned: none can be (0012 positioned every row
-- at its commit), but a round here costs nothing if so.
SELECT count(*) FROM ermis_position_changes(2147483647);
