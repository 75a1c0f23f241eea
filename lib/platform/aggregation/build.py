"""One catalog build: fetch every feed, parse, cluster, synthesise what is new or changed.

The result is the cache document stored under the catalog's key (``sources.CatalogKey``)::

    {"builtAt", "builtAtEpoch", "sourcesDigest", "stats": {...},
     "feeds": {url: {"status", "error", "etag", "lastModified", "items": [...]}},
     "stories": [{"id", "headline", "summary", "phase", "fingerprint", "model", "publishedAt",
                  "sources": [{"url", "title", "source"}]}]}

The previous document feeds the next build: its validators make fetches conditional, its
items stand in for a ``304`` (or a failed fetch: a source that fails keeps its last good items,
counted as failed), and its stories are reused when a cluster's fingerprint has not changed, so
only new or changed stories are synthesised and billed. Usage is recorded after the response
with an id made of catalog, story and fingerprint, so a rebuild never bills twice.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from lib.clock import iso_timestamp
from lib.lazy_imports import lazy_import
from lib.platform.aggregation.cluster import Cluster, cluster_items
from lib.platform.aggregation.fetch import Validators, fetch_feeds
from lib.platform.aggregation.sources import Catalog, CatalogKey

if TYPE_CHECKING:
    from lib.platform.aggregation.parse import FeedItem
    from lib.platform.aggregation.synthesis import SynthesisProvider

ai_usage = lazy_import("lib.platform.ai_usage")
parse = lazy_import("lib.platform.aggregation.parse")
synthesis = lazy_import("lib.platform.aggregation.synthesis")

STORY_PHASE = "synthesized"
MAX_CONCURRENT_SYNTHESES = 4


def _feed_state(result_status: str, items: list[FeedItem], validators: Validators, error: str | None) -> dict[str, Any]:
    return {
        "status": result_status,
        "error": error,
        "etag": validators.etag,
        "lastModified": validators.last_modified,
        "items": [item.model_dump(mode="json") for item in items],
    }


async def _collect_items(catalog: Catalog, previous: dict[str, Any]) -> tuple[dict[str, Any], list[FeedItem]]:
    feeds = catalog.feeds
    old_feeds: dict[str, Any] = previous.get("feeds", {})
    validators = {
        url: Validators(state.get("etag"), state.get("lastModified"))
        for url, state in old_feeds.items()
        if state.get("status") != "failed"
    }
    names = {feed.url: feed.shown_name for feed in feeds}
    results = await fetch_feeds([feed.url for feed in feeds], validators)
    states: dict[str, Any] = {}
    items: list[FeedItem] = []
    for result in results:
        kept = [parse.FeedItem.model_validate(raw) for raw in old_feeds.get(result.url, {}).get("items", [])]
        if result.outcome == "fetched":
            try:
                parsed = parse.parse_feed(result.body, names[result.url])
                states[result.url] = _feed_state("ok", parsed, result.validators, None)
                items += parsed
                continue
            except parse.InvalidFeed as invalid:
                result.error = str(invalid)
        if result.outcome == "not_modified":
            states[result.url] = _feed_state("not_modified", kept, result.validators, None)
        else:
            states[result.url] = _feed_state("failed", kept, Validators(), result.error)
        items += kept
    return states, items


async def _stories(
    catalog: CatalogKey, clusters: list[Cluster], previous: dict[str, Any], provider: SynthesisProvider
) -> tuple[list[dict[str, Any]], int]:
    known = {story["id"]: story for story in previous.get("stories", [])}
    limit = asyncio.Semaphore(MAX_CONCURRENT_SYNTHESES)
    synthesised = 0

    async def story_for(cluster: Cluster) -> dict[str, Any]:
        nonlocal synthesised
        old = known.get(cluster.story_id)
        if old is not None and old.get("fingerprint") == cluster.fingerprint:
            return old
        async with limit:
            result = await provider.synthesise(cluster)
        synthesised += 1
        ai_usage.record_ai_usage_after_response(
            ai_usage.AiUsage(
                id=f"synthesis:{catalog.source_set}:{catalog.locale}:{cluster.story_id}:{cluster.fingerprint}",
                model=result.model,
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
            )
        )
        published = [item.published_at for item in cluster.items if item.published_at]
        return {
            "id": cluster.story_id,
            "headline": result.headline,
            "summary": result.summary,
            "phase": STORY_PHASE,
            "fingerprint": cluster.fingerprint,
            "model": result.model,
            "publishedAt": iso_timestamp(max(published)) if published else None,
            "sources": [{"url": item.url, "title": item.title, "source": item.source} for item in cluster.items],
        }

    stories = list(await asyncio.gather(*(story_for(cluster) for cluster in clusters)))
    return stories, synthesised


async def build_catalog(catalog: Catalog, previous: dict[str, Any] | None) -> dict[str, Any]:
    previous = previous or {}
    feeds, items = await _collect_items(catalog, previous)
    clusters = cluster_items(items)
    stories, synthesised = await _stories(catalog.key, clusters, previous, synthesis.configured_provider())
    return {
        "builtAt": iso_timestamp(),
        "builtAtEpoch": time.time(),
        "sourcesDigest": catalog.sources_digest,
        "stats": {
            "feeds": len(feeds),
            "failedFeeds": sum(1 for state in feeds.values() if state["status"] == "failed"),
            "items": len(items),
            "stories": len(stories),
            "synthesised": synthesised,
        },
        "feeds": feeds,
        "stories": stories,
    }
