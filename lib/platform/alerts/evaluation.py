"""Evaluating a tenant's rules against stories: one ``alert_history`` row per new (rule, story)
match, never two — the unique (tenant, rule, story) index makes a repeat a no-op, so only
matches inserted now are delivered. New stories found during ingestion are evaluated after
the response (``on_new_stories_synchronized``)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error
from lib.platform.alerts.delivery import deliver_alert
from lib.platform.flags import is_feature_enabled
from lib.runtime.after_response import run_after_response

alert_rules = lazy_import("lib.platform.alerts.rules")

if TYPE_CHECKING:
    from lib.platform.alerts.rules import AlertRule

psycopg_json = lazy_import("psycopg.types.json")

_RECORD_MATCHES = """
INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)
SELECT m.id, %(tenant)s, m.rule_id, m.story_id, m.title, m.severity, m.channel
FROM jsonb_to_recordset(%(matches)s::jsonb)
    AS m(id text, rule_id text, story_id text, title text, severity text, channel text)
ON CONFLICT (tenant_scope_id, rule_id, story_id) DO NOTHING
RETURNING id, rule_id, story_id, title, severity, channel, delivered_at
"""


async def evaluate_alert_rules(
    tenant_scope_id: str, stories: list[dict[str, Any]], rules: list[AlertRule] | None = None
) -> int:
    """Record and deliver the new matches; returns how many alerts fired."""
    rules = await alert_rules.get_alert_rules(tenant_scope_id) if rules is None else rules
    matches = [
        {
            "id": str(uuid.uuid4()),
            "rule_id": rule.id,
            "story_id": story["id"],
            "title": story.get("headline"),
            "severity": rule.severity,
            "channel": rule.channel,
        }
        for rule in rules
        for story in stories
        if rule.matches(story)
    ]
    if not matches or not await is_feature_enabled("instantAlerts", tenant_scope_id):
        return 0
    async with connection() as conn:
        cursor = await conn.execute(
            _RECORD_MATCHES, {"tenant": tenant_scope_id, "matches": psycopg_json.Jsonb(matches)}
        )
        fired = await cursor.fetchall()
    by_id = {rule.id: rule for rule in rules}
    for alert in fired:
        payload = {
            "id": alert["id"],
            "ruleId": alert["rule_id"],
            "storyId": alert["story_id"],
            "title": alert["title"],
            "severity": alert["severity"],
            "channel": alert["channel"],
            "deliveredAt": iso_timestamp(alert["delivered_at"]),
            "tenantScopeId": tenant_scope_id,
        }
        await deliver_alert(tenant_scope_id, by_id[alert["rule_id"]], payload)
    return len(fired)


def on_new_stories_synchronized(tenant_scope_id: str, stories: list[dict[str, Any]]) -> None:
    run_after_response(
        lambda: evaluate_alert_rules(tenant_scope_id, stories),
        on_error=lambda error: log_server_error("alerts:new-stories", error, tenant=tenant_scope_id),
    )
