-- The notification stream compares tenants normalised (trim + lower case) on both sides;
-- these indexes serve exactly those reads.
CREATE INDEX alert_history_norm_tenant_idx ON alert_history (lower(btrim(tenant_scope_id)), delivered_at DESC);
CREATE INDEX review_status_events_norm_tenant_idx ON review_status_events (lower(btrim(tenant_scope_id)), changed_at DESC);
CREATE INDEX delivery_logs_norm_tenant_failed_idx ON delivery_logs (lower(btrim(tenant_scope_id)), created_at DESC)
    WHERE status = 'failed';
