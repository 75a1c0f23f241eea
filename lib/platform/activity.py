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


async def recent_alerts(tenant_scope_id: str | None, limit: int) -> list[dict[str, Any]]:
    tenant = normalize_tenant_id(tenant_scope_id)
    if not tenant:
        return []
    return await _rows(
        "SELECT id, rule_id, story_id, title, severity, channel, delivered_at AS at FROM alert_history"
        " WHERE lower(btrim(tenant_scope_id)) = %s ORDER BY delivered_at DESC, id DESC LIMIT %s",
        (tenant, limit),
    )


async def recent_review_events(review_scope: str | None, limit: int) -> list[dict[str, Any]]:
    if review_scope == ALL_TENANTS:
        return await _rows(
            "SELECT id, story_id, headline, action, tenant_scope_id, changed_at AS at FROM review_status_events"
            " ORDER BY changed_at DESC, id DESC LIMIT %s",
            (limit,),
        )
    tenant = normalize_tenant_id(review_scope)
    if not tenant:
        return []
    return await _rows(
        "SELECT id, story_id, headline, action, tenant_scope_id, changed_at AS at FROM review_status_events"
        " WHERE lower(btrim(tenant_scope_id)) = %s ORDER BY changed_at DESC, id DESC LIMIT %s",
        (tenant, limit),
    )


async def recent_failed_deliveries(tenant_scope_id: str | None, limit: int) -> list[dict[str, Any]]:
    tenant = normalize_tenant_id(tenant_scope_id)
    if not tenant:
        return []
    return await _rows(
        "SELECT id, delivery_id, tenant_scope_id, method, response_code, endpoint, created_at AS at FROM delivery_logs"
        " WHERE status = 'failed' AND lower(btrim(tenant_scope_id)) = %s ORDER BY created_at DESC, id DESC LIMIT %s",
        (tenant, limit),
    )


async def recent_notifications(user_id: str, limit: int) -> list[dict[str, Any]]:
    return await _rows(
        "SELECT id, title, body, type, read, created_at AS at FROM notifications"
        " WHERE user_id = %s ORDER BY created_at DESC, id DESC LIMIT %s",
        (user_id, limit),
    )


async def unread_notification_count(user_id: str) -> int:
    rows = await _rows("SELECT count(*)::int AS unread FROM notifications WHERE user_id = %s AND NOT read", (user_id,))
    return rows[0]["unread"]
