"""Feature flags (spec: "Feature flags and runtime controls").

Each flag has a default; an operator can set a global value and per-tenant overrides
(``feature_flag_values``: ``tenant_scope_id = ''`` is the global row). A tenant's value is its
override, else the global value, else the default. Flags that the bundle reads:

- ``rssQueuePipeline`` ("RSS queue pipeline", default off): the refresh cron publishes one
  ``rss.ingest`` message instead of refreshing the global catalog inline.
- ``notificationsRestPolling`` (default off): the notification stream answers 204 and clients
  poll the REST route instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.db.pool import connection


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
    )
}


async def resolve_feature_flags(tenant_scope_id: str | None = None) -> dict[str, bool]:
    """Every flag's value for the tenant (or the global values), in one query."""
    values = {key: flag.default for key, flag in FLAG_DEFINITIONS.items()}
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT flag_key, tenant_scope_id, enabled FROM feature_flag_values"
            " WHERE tenant_scope_id = '' OR tenant_scope_id = %s ORDER BY tenant_scope_id",
            (tenant_scope_id or "",),
        )
        # Global rows sort first (''), so a tenant override written after them wins.
        for row in await cursor.fetchall():
            if row["flag_key"] in values:
                values[row["flag_key"]] = row["enabled"]
    return values


async def is_feature_enabled(key: str, tenant_scope_id: str | None = None) -> bool:
    if key not in FLAG_DEFINITIONS:
        raise KeyError(f"unknown feature flag {key!r}")
    return (await resolve_feature_flags(tenant_scope_id))[key]
