"""Reads over ``editorial_story_drafts`` that the feed and story streams and their REST
fallbacks share: the tenant's draft watermark, its drafts, and one story's draft. The tenant is
the session's canonical id (``lib.auth.tenants``), matched against each row's normalised one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lib.auth.tenants import STORED_TENANT
from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.platform.activity import CHANNEL_HEAD, tenant_channel

MAX_FEED_DRAFTS = 200


@dataclass(frozen=True)
class FeedWatermark:
    """The spec's watermark — ``max(updated_at)`` and ``count(*)`` of one tenant's drafts — and
    the position of the tenant's drafts channel in the stream log, read in one statement. The
    position moves on every committed change, in commit order; the watermark does not when a
    transaction that started earlier (an older ``updated_at``) commits an update later."""

    payload: dict[str, Any]  # {latestUpdatedAt, draftCount}: the feed.changed contract
    position: int


async def read_draft_feed_watermark(tenant_scope_id: str) -> FeedWatermark:
    async with connection() as conn:
        cursor = await conn.execute(
            f"SELECT max(updated_at) AS latest, count(*)::int AS count, {CHANNEL_HEAD} AS position"
            f" FROM editorial_story_drafts WHERE {STORED_TENANT} = %(tenant)s",
            {"tenant": tenant_scope_id, "channel": tenant_channel("drafts", tenant_scope_id) or ""},
        )
        row = await cursor.fetchone()
    latest = row["latest"]
    payload = {"latestUpdatedAt": iso_timestamp(latest) if latest else None, "draftCount": row["count"]}
    return FeedWatermark(payload, row["position"])


def _draft_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "storyId": row["story_id"],
        "tenantScopeId": row["tenant_scope_id"],
        "headline": row["headline"],
        "summary": row["summary"],
        "status": row["status"],
        "phase": row["phase"],
        "createdAt": iso_timestamp(row["created_at"]),
        "updatedAt": iso_timestamp(row["updated_at"]),
    }


async def list_tenant_drafts(tenant_scope_id: str, limit: int = MAX_FEED_DRAFTS) -> list[dict[str, Any]]:
    async with connection() as conn:
        cursor = await conn.execute(
            f"SELECT * FROM editorial_story_drafts WHERE {STORED_TENANT} = %s ORDER BY updated_at DESC, id LIMIT %s",
            (tenant_scope_id, limit),
        )
        return [_draft_json(row) for row in await cursor.fetchall()]


async def find_story_draft(story_id: str, tenant_scope_id: str | None) -> dict[str, Any] | None:
    """The story's draft in the caller's tenant; ``tenant_scope_id=None`` (platform bypass)
    finds it in any tenant."""
    async with connection() as conn:
        if tenant_scope_id is None:
            cursor = await conn.execute(
                "SELECT * FROM editorial_story_drafts WHERE story_id = %s ORDER BY updated_at DESC LIMIT 1", (story_id,)
            )
        else:
            cursor = await conn.execute(
                f"SELECT * FROM editorial_story_drafts WHERE story_id = %s AND {STORED_TENANT} = %s",
                (story_id, tenant_scope_id),
            )
        row = await cursor.fetchone()
    return None if row is None else _draft_json(row)
