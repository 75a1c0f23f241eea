"""Scopes, catalogs and newsroom profiles.

A *scope* is either the global catalog scope (``GLOBAL_SCOPE``, which reads source set
``default`` in English) or a tenant scope id, which reads the source set and content locale of
its newsroom profile. A *catalog build* is keyed by source set + locale, so every scope on the
same pair shares one build.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from lib.db.pool import connection
from lib.observability import log_server_error

GLOBAL_SCOPE = "global"
DEFAULT_SOURCE_SET = "default"
DEFAULT_LOCALE = "en"


class Feed(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    url: str
    name: str | None = None


@dataclass(frozen=True)
class CatalogKey:
    source_set: str
    locale: str

    @property
    def cache_key(self) -> str:
        return f"platform:feed-cache:{self.source_set}:{self.locale}"

    @property
    def lock_key(self) -> str:
        return f"platform:feed-build-lock:{self.source_set}:{self.locale}"


class UnknownScope(LookupError):
    pass


async def catalog_for_scope(scope: str) -> CatalogKey:
    if scope == GLOBAL_SCOPE:
        return CatalogKey(DEFAULT_SOURCE_SET, DEFAULT_LOCALE)
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT source_set_key, content_locale FROM newsroom_profiles WHERE tenant_scope_id = %s", (scope,)
        )
        row = await cursor.fetchone()
    if row is None:
        raise UnknownScope(f"no newsroom profile for {scope}")
    return CatalogKey(row["source_set_key"], row["content_locale"])


async def load_feeds(source_set: str) -> list[Feed]:
    async with connection() as conn:
        cursor = await conn.execute("SELECT feeds FROM source_sets WHERE key = %s", (source_set,))
        row = await cursor.fetchone()
    if row is None:
        raise UnknownScope(f"no source set {source_set}")
    if not isinstance(row["feeds"], list):
        raise ValueError(f"source set {source_set}: feeds must be a JSON list")
    feeds: list[Feed] = []
    for raw in row["feeds"]:
        try:
            feeds.append(Feed.model_validate(raw))
        except ValidationError:
            log_server_error("aggregation", f"source set {source_set} has an invalid feed entry", entry=raw)
    return feeds


async def list_configured_newsroom_tenant_scope_ids() -> list[str]:
    """Tenant scopes with a completed newsroom profile; ``[]`` (never an error) when the
    repository is unavailable or the query fails, as the spec says."""
    try:
        async with connection() as conn:
            cursor = await conn.execute(
                "SELECT tenant_scope_id FROM newsroom_profiles WHERE status = 'completed' ORDER BY tenant_scope_id"
            )
            return [row["tenant_scope_id"] for row in await cursor.fetchall()]
    except Exception as error:  # noqa: BLE001 - the spec's contract: no profiles, not a failure
        log_server_error("tenant-ingestion", error)
        return []
