-- Alerts and failed deliveries notify apart (issue 13): 'alerts|<tenant>' and
-- 'deliveries|<tenant>' instead of one 'activity|<tenant>', so an alert no longer makes every
-- stream of its tenant read the failed deliveries again. And a delivery log notifies only when the
-- row it leaves is a failed delivery — the only kind the streams read: a busy webhook's
-- successful deliveries wake nobody. Deletions notify no one: a stream sends rows it has not
-- seen, and a row that is gone is not one.
DROP TRIGGER alert_history_notify ON alert_history;
CREATE TRIGGER alert_history_notify AFTER INSERT OR UPDATE ON alert_history
    FOR EACH ROW EXECUTE FUNCTION ermis_notify_change('alerts:tenant_scope_id');
DROP TRIGGER delivery_logs_notify ON delivery_logs;
CREATE TRIGGER delivery_logs_notify AFTER INSERT OR UPDATE ON delivery_logs
    FOR EACH ROW WHEN (NEW.status = 'failed') EXECUTE FUNCTION ermis_notify_change('deliveries:tenant_scope_id');
