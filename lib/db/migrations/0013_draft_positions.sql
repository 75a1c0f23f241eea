-- The feed's version in commit order (issue 20, #7). The feed stream signals "the tenant's drafts
-- changed" with the watermark max(updated_at), count(*). Neither moves when a transaction that
-- started earlier (so its updated_at = now() is older) commits an update after a later one was
-- already read: the stream stayed silent and the feed stale. Every write to a draft is now logged
-- in stream_changes under 'drafts|<tenant>' (the channel the change notifications of 0010 use)
-- and positioned at commit by 0012's trigger, so the channel's head moves on every committed
-- change, in commit order. A draft moved to another tenant changes both feeds.
CREATE FUNCTION ermis_log_drafts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stream_changes (channel, row_id)
        SELECT 'drafts|' || left(lower(btrim(tenant_scope_id)), 200), id FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO stream_changes (channel, row_id)
        SELECT 'drafts|' || left(lower(btrim(tenant_scope_id)), 200), id FROM old_rows;
    ELSE
        INSERT INTO stream_changes (channel, row_id)
        SELECT 'drafts|' || left(lower(btrim(tenant_scope_id)), 200), id FROM new_rows
        UNION
        SELECT 'drafts|' || left(lower(btrim(tenant_scope_id)), 200), id FROM old_rows;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER editorial_story_drafts_stream_log_insert AFTER INSERT ON editorial_story_drafts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_drafts();
CREATE TRIGGER editorial_story_drafts_stream_log_update AFTER UPDATE ON editorial_story_drafts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_drafts();
CREATE TRIGGER editorial_story_drafts_stream_log_delete AFTER DELETE ON editorial_story_drafts
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ermis_log_drafts();
