"""Stories for a scope: the spec's ``listAggregatedStories`` and the build-free peek.

``list_aggregated_stories(scope, force_refresh, bootstrap_refresh)``:

- reads the catalog's cached build; without ``force_refresh`` that is the answer (and with no
  cache, ``bootstrap_refresh='if-missing'`` builds one, ``'never'`` answers ``[]``);
- with ``force_refresh``, rebuilds unless the cache was built for the catalog's current feeds
  within the per-catalog throttle (``ERMIS_FEED_BUILD_THROTTLE_S``, default 120 s), under the
  cross-instance build lock: so N scopes on one catalog and locale in one tick cost one build;
- for a tenant scope, then upserts the tenant's ``editorial_story_drafts`` from the build in
  one statement (new stories inserted as ``review``; changed ones updated, moving
  ``updated_at``; unchanged and published ones left alone), and hands the new stories to
  ``on_new_stories_synchronized`` (alert evaluation after the response).

Per tenant that is a constant four statements (catalog, cached build — its JSON only when it
changed since this instance last read it —, drafts upsert; plus the build when one is due).
The cache expires ``CACHE_TTL`` after its last build, so the state cleanup cron removes
abandoned catalogs.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any, Literal

from lib.db.pool import connection
from lib.db.state_store import set_state
from lib.lazy_imports import lazy_import
from lib.platform.aggregation.build import build_catalog
from lib.platform.aggregation.lock import build_lock
from lib.platform.aggregation.sources import GLOBAL_SCOPE, Catalog, CatalogKey, catalog_for_scope
from lib.platform.alerts.evaluation import on_new_stories_synchronized
from lib.settings import get_settings

psycopg_json = lazy_import("psycopg.types.json")

CACHE_TTL = timedelta(days=7)
BootstrapRefresh = Literal["if-missing", "never"]

# cache key -> (the row's updated_at, the build): a warm instance reads a catalog's build once
# per change, not once per tenant.
_builds: dict[str, tuple[datetime, dict[str, Any]]] = {}


async def read_build(key: CatalogKey) -> dict[str, Any] | None:
    """The catalog's cached build; the JSON crosses the wire only when it changed."""
    known = _builds.get(key.cache_key)
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT updated_at, CASE WHEN updated_at = %s THEN NULL ELSE value END AS value"
            " FROM platform_state WHERE key = %s AND (expires_at IS NULL OR expires_at > now())",
            (known[0] if known else None, key.cache_key),
        )
        row = await cursor.fetchone()
    if row is None:
        _builds.pop(key.cache_key, None)
        return None
    if row["value"] is not None:
        _builds[key.cache_key] = (row["updated_at"], row["value"])
    return _builds[key.cache_key][1]


def _fresh(cached: dict[str, Any] | None, catalog: Catalog) -> bool:
    """Built for the catalog's current feeds, within the throttle window."""
    throttle = get_settings().ermis_feed_build_throttle_s
    return (
        cached is not None
        and cached.get("sourcesDigest") == catalog.sources_digest
        and time.time() - cached.get("builtAtEpoch", 0) < throttle
    )


async def refresh_catalog(catalog: Catalog) -> dict[str, Any] | None:
    """Build the catalog unless a fresh build exists. When another instance holds the lock,
    wait for it and use its build; if its lock expired without a build (it crashed), take
    the lock and build."""
    cached = None
    for _ in range(2):
        async with build_lock(catalog.key.lock_key) as held:
            cached = await read_build(catalog.key)
            if _fresh(cached, catalog):
                return cached
            if held:
                build = await build_catalog(catalog, cached)
                await set_state(catalog.key.cache_key, build, ttl=CACHE_TTL)
                return build
    return cached


async def list_aggregated_stories(
    scope: str = GLOBAL_SCOPE, force_refresh: bool = False, bootstrap_refresh: BootstrapRefresh = "if-missing"
) -> list[dict[str, Any]]:
    catalog = await catalog_for_scope(scope)
    cached = await read_build(catalog.key)
    if (force_refresh and not _fresh(cached, catalog)) or (cached is None and bootstrap_refresh == "if-missing"):
        build = await refresh_catalog(catalog)
    else:
        build = cached
    stories = (build or {}).get("stories", [])
    if scope != GLOBAL_SCOPE and stories:
        new_ids = await sync_tenant_drafts(scope, stories)
        if new_ids:
            on_new_stories_synchronized(scope, [story for story in stories if story["id"] in new_ids])
    return stories


async def peek_tenant_scoped_aggregated_stories(scope: str) -> list[dict[str, Any]] | None:
    """The scope's built stories without building; ``None`` when nothing was built yet."""
    cached = await read_build((await catalog_for_scope(scope)).key)
    return None if cached is None else cached.get("stories", [])


_SYNC_DRAFTS = """
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(stories)s::jsonb) AS s(id text, headline text, summary text, phase text)
)
INSERT INTO editorial_story_drafts AS d (id, tenant_scope_id, story_id, headline, summary, status, phase)
SELECT %(tenant)s || ':' || input.id, %(tenant)s, input.id, input.headline, input.summary, 'review', input.phase
FROM input
ON CONFLICT (tenant_scope_id, story_id) DO UPDATE
    SET headline = EXCLUDED.headline, summary = EXCLUDED.summary, phase = EXCLUDED.phase, updated_at = now()
    WHERE d.status = 'review'
      AND (d.headline, d.summary, d.phase) IS DISTINCT FROM (EXCLUDED.headline, EXCLUDED.summary, EXCLUDED.phase)
RETURNING story_id, (xmax = 0) AS inserted
"""


async def sync_tenant_drafts(tenant_scope_id: str, stories: list[dict[str, Any]]) -> set[str]:
    """Upsert the tenant's drafts from a build; returns the ids of stories new to the tenant."""
    rows = [{key: story[key] for key in ("id", "headline", "summary", "phase")} for story in stories]
    async with connection() as conn:
        cursor = await conn.execute(_SYNC_DRAFTS, {"stories": psycopg_json.Jsonb(rows), "tenant": tenant_scope_id})
        return {row["story_id"] for row in await cursor.fetchall() if row["inserted"]}
