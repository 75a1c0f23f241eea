"""Scopes, catalogs and newsroom profiles.

A *scope* is either the global catalog scope (``GLOBAL_SCOPE``, which reads source set
``default`` in English) or a tenant scope id, which reads the source set and content locale of
its newsroom profile. A *catalog build* is keyed by source set + locale, so every scope on the
same pair shares one build.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error

GLOBAL_SCOPE = "global"
DEFAULT_SOURCE_SET = "default"
DEFAULT_LOCALE = "en"

destinations = lazy_import("lib.egress.destinations")


@dataclass(frozen=True)
class Feed:
    """One feed of a source set: a plain record (no pydantic, so importing the catalog costs a
    function's start nothing); ``from_json`` checks an entry of the stored JSON list."""

    url: str
    name: str | None = None

    @classmethod
    def from_json(cls, raw: object) -> Feed:
        """Extra keys are ignored; a missing or non-text ``url``, or a non-text ``name``, is a ValueError."""
        if not isinstance(raw, dict) or not isinstance(raw.get("url"), str):
            raise ValueError("a feed needs a text url")
        name = raw.get("name")
        if name is not None and not isinstance(name, str):
            raise ValueError("a feed's name must be text")
        return cls(raw["url"], name)

    @property
    def shown_name(self) -> str:
        """How members read the feed: its name, or its URL's display form (never the URL's
        credentials, query or fragment: a catalog URL's token rides there)."""
        return self.name if self.name and self.name.strip() else destinations.display_url(self.url)


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


@dataclass(frozen=True)
class Catalog:
    """A scope's catalog as configured now: its key and its feeds."""

    key: CatalogKey
    feeds: tuple[Feed, ...]

    @property
    def sources_digest(self) -> str:
        """Changes when the catalog's feed list changes, which makes an existing build stale."""
        return hashlib.sha256("\n".join(sorted(feed.url for feed in self.feeds)).encode()).hexdigest()[:16]


class UnknownScope(LookupError):
    pass


def _feeds(source_set: str, raw_feeds: object) -> tuple[Feed, ...]:
    if not isinstance(raw_feeds, list):
        raise ValueError(f"source set {source_set}: feeds must be a JSON list")
    feeds: list[Feed] = []
    for raw in raw_feeds:
        try:
            feeds.append(Feed.from_json(raw))
        except ValueError:
            log_server_error("aggregation", f"source set {source_set} has an invalid feed entry", entry=raw)
    return tuple(feeds)


async def catalog_for_scope(scope: str) -> Catalog:
    """The scope's catalog in one query: the global scope reads ``default`` in English, a tenant
    the source set and locale of its newsroom profile."""
    async with connection() as conn:
        if scope == GLOBAL_SCOPE:
            cursor = await conn.execute(
                "SELECT key AS source_set_key, %s AS content_locale, feeds FROM source_sets WHERE key = %s",
                (DEFAULT_LOCALE, DEFAULT_SOURCE_SET),
            )
        else:
            cursor = await conn.execute(
                "SELECT p.source_set_key, p.content_locale, s.feeds FROM newsroom_profiles p"
                " JOIN source_sets s ON s.key = p.source_set_key WHERE p.tenant_scope_id = %s",
                (scope,),
            )
        row = await cursor.fetchone()
    if row is None:
        raise UnknownScope(f"no catalog for scope {scope}")
    key = CatalogKey(row["source_set_key"], row["content_locale"])
    return Catalog(key, _feeds(key.source_set, row["feeds"]))


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
