"""One refresh tick's tenant ingestion at scale: 500 tenants over 5 catalogs of 40 feeds each.

Feeds are served on loopback (tests.support.feeds). Reports builds performed (feed fetches /
feeds per catalog), wall time, and database statements per tenant — measured at two sizes
(100 and 500 tenants) to show the per-tenant work is constant. Statements are counted by
wrapping psycopg's ``AsyncConnection.execute`` for the run (``counting_statements``) (every query the bundle issues goes
through it). Target: 5 builds per tick; a constant number of statements per tenant.

Run: ``.venv/bin/python -m benchmarks.tenant_tick``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time

import psycopg

from benchmarks.services import benchmark_services, counting_statements
from lib.db.pool import close_pools
from lib.platform.tenant_ingestion import ingest_all_tenant_scoped_feeds
from lib.redis.client import close_redis
from lib.runtime.after_response import wait_for_detached_work
from lib.settings import get_settings
from tests.support.feeds import FeedServer, rss
from tests.support.servers import serve_in_thread

CATALOGS = 5
FEEDS_PER_CATALOG = 40
ITEMS_PER_FEED = 10


def seed(database_url: str, server: FeedServer, tenants: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE newsroom_profiles, editorial_story_drafts, platform_state, alert_history")
        conn.execute("DELETE FROM source_sets WHERE key <> 'default'")
        for catalog in range(CATALOGS):
            urls = [server.url(f"c{catalog}-f{feed}") for feed in range(FEEDS_PER_CATALOG)]
            feeds = json.dumps([{"url": url, "name": url.rsplit("/", 1)[-1]} for url in urls])
            conn.execute("INSERT INTO source_sets (key, feeds) VALUES (%s, %s::jsonb)", (f"catalog-{catalog}", feeds))
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO newsroom_profiles (tenant_scope_id, status, source_set_key) VALUES (%s, 'completed', %s)",
                [(f"org_{tenant:04}", f"catalog-{tenant % CATALOGS}") for tenant in range(tenants)],
            )


async def tick() -> tuple[dict, float]:
    started = time.perf_counter()
    result = await ingest_all_tenant_scoped_feeds(0)
    elapsed = time.perf_counter() - started
    await wait_for_detached_work()
    await close_redis()
    await close_pools()
    return result, elapsed


WORDS = (
    "storm election market court vaccine rocket festival strike bridge harvest summit drought merger"
    " treaty protest museum glacier satellite tariff orchestra pipeline verdict census wildfire"
).split()


def headline(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, 5)).capitalize()


def main() -> None:
    rng = random.Random(7)
    server = FeedServer()
    for catalog in range(CATALOGS):
        for feed in range(FEEDS_PER_CATALOG):
            items = [
                (headline(rng), f"https://c{catalog}.example/{feed}/{item}", "Text.") for item in range(ITEMS_PER_FEED)
            ]
            server.feeds[f"c{catalog}-f{feed}"] = rss(f"c{catalog}-f{feed}", items)
    os.environ["ERMIS_TENANT_INGESTION_TIME_BUDGET_MS"] = "600000"
    with benchmark_services() as (database_url, _), serve_in_thread(server.app) as url:
        server.base_url = url
        get_settings.cache_clear()
        totals: dict[int, int] = {}
        for tenants in (100, 500):
            seed(database_url, server, tenants)
            fetches_before = server.total_fetches()
            with counting_statements() as statements:
                result, elapsed = asyncio.run(tick())
            builds = (server.total_fetches() - fetches_before) / FEEDS_PER_CATALOG
            assert result["refreshed"] == tenants and result["failed"] == 0, result
            totals[tenants] = statements["all"]
            print(
                f"{tenants} tenants / {CATALOGS} catalogs x {FEEDS_PER_CATALOG} feeds: {builds:.0f} builds,"
                f" {elapsed:.2f} s wall, {statements['all']} statements"
            )
        # The builds (and their AI usage records) are the same at both sizes; the difference is tenant work.
        print(f"statements per additional tenant: {(totals[500] - totals[100]) / 400:.2f}")


if __name__ == "__main__":
    main()
