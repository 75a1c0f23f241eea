-- Change notifications for the streams (issue 13): after a write to a table a stream reads,
-- pg_notify on channel 'ermis_changes' says which audience changed — never the row's content.
-- A payload is '<kind>|<value>': 'activity|<tenant>' (alerts, failed deliveries), 'review|<tenant>',
-- 'drafts|<tenant>' (the feed and story streams) with the tenant trimmed and lower-cased as the
-- reads compare it, and 'user|<user id>' (notifications). Postgres folds identical payloads of one
-- transaction into one notification, so a bulk insert notifies each audience once.
CREATE FUNCTION ermis_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed jsonb := to_jsonb(COALESCE(NEW, OLD));
    audience text;
    kind text;
    value text;
BEGIN
    FOREACH audience IN ARRAY TG_ARGV LOOP
        kind := split_part(audience, ':', 1);
        value := COALESCE(changed ->> split_part(audience, ':', 2), '');
        IF kind <> 'user' THEN
            value := lower(btrim(value));
        END IF;
        PERFORM pg_notify('ermis_changes', kind || '|' || left(value, 200));
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER alert_history_notify AFTER INSERT OR UPDATE OR DELETE ON alert_history
    FOR EACH ROW EXECUTE FUNCTION ermis_notify_change('activity:tenant_scope_id');
CREATE TRIGGER delivery_logs_notify AFTER INSERT OR UPDATE OR DELETE ON delivery_logs
    FOR EACH ROW EXECUTE FUNCTION ermis_notify_change('activity:tenant_scope_id');
CREATE TRIGGER review_status_events_notify AFTER INSERT OR UPDATE OR DELETE ON review_status_events
    FOR EACH ROW EXECUTE FUNCTION ermis_notify_change('review:tenant_scope_id');
CREATE TRIGGER notifications_notify AFTER INSERT OR UPDATE OR DELETE ON notifications
    FOR EACH ROW EXECUTE FUNCTION ermis_notify_change('user:user_id');
CREATE TRIGGER editorial_story_drafts_notify AFTER INSERT OR UPDATE OR DELETE ON editorial_story_drafts
    FOR EACH ROW EXECUTE FUNCTION ermis_notify_change('drafts:tenant_scope_id');
