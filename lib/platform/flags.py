"""Feature flags (spec: "Feature flags and runtime controls").

Each flag has a default; an operator can set a global value and per-tenant overrides
(``feature_flag_values``: ``tenant_scope_id = ''`` is the global row). A tenant's value is its
override, else the global value, else the default. Reads are one query for all flags, made
once per invocation (``lib.runtime.invocation``): a flag flipped mid-request takes effect on
the next one.
``set_feature_flag`` / ``clear_feature_flag`` are what ``PUT /api/admin/flags`` calls; the
tenant they are given is canonical (``lib.auth.tenants``), and an override is matched by its
normalised tenant, as every tenant read is.
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.auth.tenants import STORED_TENANT
from lib.db.pool import connection
from lib.runtime.invocation import invocation_memo


@dataclass(frozen=True)
class FlagDefinition:
    key: str
    label: str
    description: str
    default: bool = False


FLAG_DEFINITIONS: dict[str, FlagDefinition] = {
    flag.key: flag
    for flag in (
        FlagDefinition(
            "rssQueuePipeline",
            "RSS queue pipeline",
            "Moves the ten-minute refresh of the global catalog onto the signed rss.ingest queue consumer.",
        ),
        FlagDefinition(
            "notificationsRestPolling",
            "Notifications REST polling",
            "Forces the realtime notification/monitoring/review surfaces onto REST polling instead of the default"
            " Server-Sent Events stream. Off by default (SSE). Enable to avoid long-lived streaming functions;"
            " clients fall back to a 12s poll.",
        ),
        FlagDefinition(
            "instantAlerts",
            "Instant alerts",
            "Evaluates the tenant's alert rules against new stories and in the ten-minute sweep.",
            default=True,
        ),
        FlagDefinition(
            "alertWebhooks",
            "Alert webhooks",
            "Delivers webhook-channel alerts to their endpoints; off records the alert without calling out.",
            default=True,
        ),
        FlagDefinition(
            "aiUsageMetering",
            "AI usage metering",
            "Sends AI usage from the metering outbox to Polar; off leaves rows pending until it is on again.",
            default=True,
        ),
    )
}


async def resolve_feature_flags(tenant_scope_id: str | None = None) -> dict[str, bool]:
    """Every flag's value for the tenant (or the global values), in one query, read once per
    invocation."""
    memo = invocation_memo()
    memo_key = ("feature-flags", tenant_scope_id or "")
    if memo is not None and memo_key in memo:
        return dict(memo[memo_key])
    values = {key: flag.default for key, flag in FLAG_DEFINITIONS.items()}
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT flag_key, tenant_scope_id, enabled FROM feature_flag_values"
            f" WHERE tenant_scope_id = '' OR {STORED_TENANT} = %s ORDER BY tenant_scope_id",
            (tenant_scope_id or "",),
        )
        # Global rows sort first (''), so a tenant override written after them wins.
        for row in await cursor.fetchall():
            if row["flag_key"] in values:
                values[row["flag_key"]] = row["enabled"]
    if memo is not None:
        memo[memo_key] = dict(values)
    return values


async def is_feature_enabled(key: str, tenant_scope_id: str | None = None) -> bool:
    _check_key(key)
    return (await resolve_feature_flags(tenant_scope_id))[key]


class UnknownFlag(KeyError):
    pass


def _check_key(key: str) -> None:
    if key not in FLAG_DEFINITIONS:
        raise UnknownFlag(key)


async def set_feature_flag(key: str, enabled: bool, tenant_scope_id: str | None = None) -> None:
    _check_key(key)
    async with connection() as conn:
        await conn.execute(
            "INSERT INTO feature_flag_values (flag_key, tenant_scope_id, enabled) VALUES (%s, %s, %s)"
            " ON CONFLICT (flag_key, tenant_scope_id) DO UPDATE SET enabled = EXCLUDED.enabled, updated_at = now()",
            (key, tenant_scope_id or "", enabled),
        )


async def clear_feature_flag(key: str, tenant_scope_id: str | None = None) -> bool:
    """Remove a tenant override (or, without a tenant, the global value: back to the default)."""
    _check_key(key)
    async with connection() as conn:
        cursor = await conn.execute(
            f"DELETE FROM feature_flag_values WHERE flag_key = %s AND {STORED_TENANT} = %s",
            (key, tenant_scope_id or ""),
        )
        return cursor.rowcount > 0


async def list_feature_flags() -> list[dict[str, object]]:
    """Every flag with its definition, global value and tenant overrides (the admin view)."""
    async with connection() as conn:
        cursor = await conn.execute("SELECT flag_key, tenant_scope_id, enabled FROM feature_flag_values")
        rows = await cursor.fetchall()
    flags = []
    for flag in FLAG_DEFINITIONS.values():
        mine = [row for row in rows if row["flag_key"] == flag.key]
        global_value = next((row["enabled"] for row in mine if row["tenant_scope_id"] == ""), flag.default)
        flags.append(
            {
                "key": flag.key,
                "label": flag.label,
                "description": flag.description,
                "default": flag.default,
                "enabled": global_value,
                "overrides": {row["tenant_scope_id"]: row["enabled"] for row in mine if row["tenant_scope_id"]},
            }
        )
    return flags
