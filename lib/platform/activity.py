"""What the notification stream and ``GET /api/notifications`` read: a user's notifications
and a tenant's alert history, review status events and failed deliveries, newest first.

Tenants are compared normalised — ``normalize_tenant_id``: trim, then lower case — on both
sides; a blank tenant never matches (the read is not even made). ``review_scope=ALL_TENANTS``
is the platform review (every tenant's events).
"""

from __future__ import annotations

from typing import Any, Final

from lib.db.pool import connection

ALL_TENANTS: Final = "*"


def normalize_tenant_id(tenant_scope_id: str | None) -> str:
    return (tenant_scope_id or "").strip().lower()


async def _rows(sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    async with connection() as conn:
        cursor = await conn.execute(sql, params)
        return await cursor.fetchall()


# (select list and table, the time column the newest-first order and the indexes use)
_ALERTS = (
    "SELECT id, rule_id, story_id, title, severity, channel, delivered_at AS at FROM alert_history",
    "delivered_at",
)
_REVIEWS = (
    "SELECT id, story_id, headline, action, tenant_scope_id, changed_at AS at FROM review_status_events",
    "changed_at",
)
_DELIVERIES = (
    "SELECT id, delivery_id, tenant_scope_id, method, response_code, endpoint, created_at AS at FROM delivery_logs",
    "created_at",
)
_NOTIFICATIONS = ("SELECT id, title, body, type, read, created_at AS at FROM notifications", "created_at")


async def _newest(
    source: tuple[str, str], conditions: list[str], params: tuple[Any, ...], limit: int
) -> list[dict[str, Any]]:
    select, time_column = source
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return await _rows(f"{select}{where} ORDER BY {time_column} DESC, id DESC LIMIT %s", (*params, limit))


async def _newest_for_tenant(
    source: tuple[str, str], tenant_scope_id: str | None, limit: int, conditions: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    tenant = normalize_tenant_id(tenant_scope_id)
    if not tenant:
        return []
    return await _newest(source, [*conditions, "lower(btrim(tenant_scope_id)) = %s"], (tenant,), limit)


async def recent_alerts(tenant_scope_id: str | None, limit: int) -> list[dict[str, Any]]:
    return await _newest_for_tenant(_ALERTS, tenant_scope_id, limit)


async def recent_review_events(review_scope: str | None, limit: int) -> list[dict[str, Any]]:
    if review_scope == ALL_TENANTS:
        return await _newest(_REVIEWS, [], (), limit)
    return await _newest_for_tenant(_REVIEWS, review_scope, limit)


async def recent_failed_deliveries(tenant_scope_id: str | None, limit: int) -> list[dict[str, Any]]:
    return await _newest_for_tenant(_DELIVERIES, tenant_scope_id, limit, ("status = 'failed'",))


async def recent_notifications(user_id: str, limit: int) -> list[dict[str, Any]]:
    return await _newest(_NOTIFICATIONS, ["user_id = %s"], (user_id,), limit)


async def unread_notification_count(user_id: str) -> int:
    rows = await _rows("SELECT count(*)::int AS unread FROM notifications WHERE user_id = %s AND NOT read", (user_id,))
    return rows[0]["unread"]
