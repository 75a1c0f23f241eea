-- Issue 21: every tenant read compares a row's tenant normalised (lower(btrim(tenant_scope_id)),
-- lib.auth.tenants.STORED_TENANT) with the session's canonical id, so the draft reads' index
-- is on that expression.
DROP INDEX IF EXISTS editorial_story_drafts_tenant_updated_idx;
CREATE INDEX editorial_story_drafts_tenant_updated_idx
    ON editorial_story_drafts (lower(btrim(tenant_scope_id)), updated_at DESC);
