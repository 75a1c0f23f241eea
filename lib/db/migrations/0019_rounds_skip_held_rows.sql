-- A round never waits on another transaction's row lock (issue 43, item 3). Before, a committed
-- but unpositioned stream_changes row that another transaction held (an erasure deleting the
-- person's rows, an update) made the round's UPDATE wait for it while it held the positioner's
-- advisory lock: every positioning, every REST snapshot and every stream's first read in the
-- deployment waited behind one row lock, for as long as that transaction stayed open.
--
-- Now the round takes its rows FOR UPDATE SKIP LOCKED. A channel with a held row is left whole
-- for a later round (its other rows too): within a channel positions still follow the log's
-- order, and that channel's rows are positioned, once, when the holder ends (or are gone, if it
-- deleted them). Every other channel goes on as if nothing were held.
--
-- The round needs READ COMMITTED: its second statement must see what the round before it
-- committed (under REPEATABLE READ or SERIALIZABLE the whole round would read one snapshot taken
-- before it waited for the advisory lock). The caller begins the transaction with that level
-- (lib.streams.positioner); the function refuses any other rather than misposition.
DROP FUNCTION ermis_position_changes(int);

CREATE FUNCTION ermis_position_changes(batch_size int)
RETURNS TABLE (channel text, head bigint, moved int, after bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM stream_changes WHERE position IS NULL) THEN
        RETURN;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'ermis_position_changes needs READ COMMITTED, not %', current_setting('transaction_isolation');
    END IF;
    PERFORM pg_advisory_xact_lock(1163022163, 1347375956);  -- 'ERMS', 'POST': the positioner's lock
    -- A new statement, a new snapshot: it sees what the round before this one committed.
    RETURN QUERY
    WITH waiting AS (
        SELECT s.id, s.channel FROM stream_changes s WHERE s.position IS NULL ORDER BY s.id LIMIT batch_size
    ), free AS (
        SELECT s.id FROM stream_changes s
        WHERE s.id IN (SELECT w.id FROM waiting w) AND s.position IS NULL
        FOR UPDATE SKIP LOCKED
    ), drawn AS (
        SELECT mine.id, nextval('stream_position_seq') AS position
        FROM (
            SELECT w.id FROM waiting w
            WHERE w.id IN (SELECT f.id FROM free f)
              AND w.channel NOT IN (SELECT held.channel FROM waiting held
                                    WHERE held.id NOT IN (SELECT f.id FROM free f))
            ORDER BY w.id
        ) mine
    ), positioned AS (
        UPDATE stream_changes c SET position = drawn.position
        FROM drawn WHERE c.id = drawn.id
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
