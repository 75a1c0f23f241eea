-- A round also answers, for each channel it advanced, the channel's head before it (issue 36): the
-- change detector tells the stream processes "positions after <after> up to <head> are these rows",
-- and a process that holds the channel's rows up to <after> appends them without a read of its
-- own (lib.streams.tails). The head before is read in the same statement as the update, so it
-- sees the log as it was before the round (a statement's sub-queries share its snapshot), and it
-- is never below the channel's retention horizon.
DROP FUNCTION ermis_position_changes(int);

CREATE FUNCTION ermis_position_changes(batch_size int)
RETURNS TABLE (channel text, head bigint, moved int, after bigint)
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
    ), moved AS (
        SELECT p.channel, max(p.position) AS head, count(*)::int AS moved FROM positioned p GROUP BY p.channel
    )
    SELECT m.channel, m.head, m.moved, GREATEST(
        COALESCE((SELECT max(s.position) FROM stream_changes s
                  WHERE s.channel = m.channel AND s.position IS NOT NULL), 0),
        COALESCE((SELECT k.pruned_through FROM stream_channels k WHERE k.channel = m.channel), 0))
    FROM moved m;
END
$$;
