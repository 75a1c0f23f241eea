-- Stream positions in commit order (issue 20). Every row a notification stream sends — an alert,
-- a failed delivery, a review event, a personal notification — gets a row in stream_changes:
-- its channel (the audience that may see it: 'alerts|<tenant>', 'deliveries|<tenant>',
-- 'review|<tenant>' and 'review|*', 'user|<user id>'; the same strings the change notifications
-- of 0010/0011 carry) and, at commit, a position. A stream's cursor is the last position it sent
-- per channel; it resumes with "the rows of my channels after these positions".
--
-- Why positions are assigned at commit, under a per-channel lock: a position drawn at insert time
-- (a bigserial) can commit after a higher one is already visible, and a reader that moved past the
-- higher one would skip it for ever. Here a deferred constraint trigger runs at COMMIT: it takes
-- one advisory lock per channel the transaction wrote (all of them, in one sorted order, so two
-- committing writers never deadlock), draws the positions, and the locks are held until the commit
-- is visible. The next writer of a channel draws only after that, so within a channel positions
-- become visible in increasing order: nothing can later appear below a position a reader has seen.
-- No watermark is needed, so a long transaction elsewhere (the refresh tick, a cleanup batch)
-- holds back no stream; writers of one channel wait for each other only for the last instant of
-- their commits.
CREATE SEQUENCE stream_position_seq;

-- Which database a position belongs to: a cursor from another database is refused (stream.reset).
CREATE TABLE stream_log_epoch (epoch text NOT NULL);
INSERT INTO stream_log_epoch VALUES (substr(md5(random()::text || clock_timestamp()::text), 1, 12));

CREATE TABLE stream_changes (
    id bigserial PRIMARY KEY,
    position bigint,  -- NULL until the writing transaction commits
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    channel text NOT NULL,
    row_id text NOT NULL,
    logged_at timestamptz NOT NULL DEFAULT now(),
    -- the person a channel names (erasure purges their channel with their notifications)
    subject_user_id text GENERATED ALWAYS AS (CASE WHEN channel LIKE 'user|%' THEN substr(channel, 6) END) STORED
);
CREATE UNIQUE INDEX stream_changes_channel_position_idx ON stream_changes (channel, position)
    WHERE position IS NOT NULL;
CREATE INDEX stream_changes_unpositioned_idx ON stream_changes (xid) WHERE position IS NULL;
CREATE INDEX stream_changes_logged_at_idx ON stream_changes (logged_at);
CREATE INDEX stream_changes_subject_idx ON stream_changes (subject_user_id) WHERE subject_user_id IS NOT NULL;

-- Retention: the state cleanup deletes old positions and records here, per channel, the highest
-- one it deleted. A cursor below it may have missed rows that are gone: the stream says so.
CREATE TABLE stream_channels (
    channel text PRIMARY KEY,
    pruned_through bigint NOT NULL
);

CREATE FUNCTION ermis_position_stream_changes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    channel_hash int;
BEGIN
    -- Fired once per logged row at commit; the first firing positions the whole transaction.
    IF (SELECT position FROM stream_changes WHERE id = NEW.id) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    FOR channel_hash IN
        SELECT DISTINCT hashtext(channel) AS h FROM stream_changes
        WHERE xid = pg_current_xact_id() AND position IS NULL ORDER BY h
    LOOP
        PERFORM pg_advisory_xact_lock(1163022163, channel_hash);  -- 1163022163: 'ERMS', our lock class
    END LOOP;
    UPDATE stream_changes c SET position = drawn.position
    FROM (
        SELECT id, nextval('stream_position_seq') AS position
        FROM (SELECT id FROM stream_changes WHERE xid = pg_current_xact_id() AND position IS NULL ORDER BY id) mine
    ) drawn
    WHERE c.id = drawn.id;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER stream_changes_position AFTER INSERT ON stream_changes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ermis_position_stream_changes();

-- One statement-level trigger per written table: one INSERT ... SELECT per statement, so a
-- sweep inserting 10,000 alerts logs them in one statement too. Tenants are trimmed and
-- lower-cased exactly as the change notifications and the reads compare them.
CREATE FUNCTION ermis_log_alerts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stream_changes (channel, row_id)
    SELECT 'alerts|' || left(lower(btrim(tenant_scope_id)), 200), id FROM new_rows;
    RETURN NULL;
END
$$;
CREATE TRIGGER alert_history_stream_log AFTER INSERT ON alert_history
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_alerts();

CREATE FUNCTION ermis_log_failed_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stream_changes (channel, row_id)
        SELECT 'deliveries|' || left(lower(btrim(tenant_scope_id)), 200), id FROM new_rows WHERE status = 'failed';
    ELSE  -- a delivery that becomes failed is new to the streams
        INSERT INTO stream_changes (channel, row_id)
        SELECT 'deliveries|' || left(lower(btrim(n.tenant_scope_id)), 200), n.id
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.status = 'failed' AND o.status IS DISTINCT FROM 'failed';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER delivery_logs_stream_log AFTER INSERT ON delivery_logs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_failed_deliveries();
CREATE TRIGGER delivery_logs_stream_log_update AFTER UPDATE ON delivery_logs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_failed_deliveries();

-- A review event is seen by its tenant's reviewers and by the platform reviewer ('review|*').
CREATE FUNCTION ermis_log_reviews() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stream_changes (channel, row_id)
    SELECT channel, id FROM new_rows
    CROSS JOIN LATERAL (VALUES
        ('review|' || left(lower(btrim(COALESCE(tenant_scope_id, ''))), 200)), ('review|*')
    ) channels(channel);
    RETURN NULL;
END
$$;
CREATE TRIGGER review_status_events_stream_log AFTER INSERT ON review_status_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_reviews();

CREATE FUNCTION ermis_log_notifications() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stream_changes (channel, row_id) SELECT 'user|' || left(user_id, 200), id FROM new_rows;
    RETURN NULL;
END
$$;
CREATE TRIGGER notifications_stream_log AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_notifications();

-- The rows written before this migration, oldest first, positioned when it commits.
INSERT INTO stream_changes (channel, row_id)
SELECT 'alerts|' || left(lower(btrim(tenant_scope_id)), 200), id FROM alert_history ORDER BY delivered_at, id;
INSERT INTO stream_changes (channel, row_id)
SELECT 'deliveries|' || left(lower(btrim(tenant_scope_id)), 200), id FROM delivery_logs
WHERE status = 'failed' ORDER BY created_at, id;
INSERT INTO stream_changes (channel, row_id)
SELECT channel, id FROM (SELECT * FROM review_status_events ORDER BY changed_at, id) r
CROSS JOIN LATERAL (VALUES
    ('review|' || left(lower(btrim(COALESCE(tenant_scope_id, ''))), 200)), ('review|*')
) channels(channel);
INSERT INTO stream_changes (channel, row_id)
SELECT 'user|' || left(user_id, 200), id FROM notifications ORDER BY created_at, id;
