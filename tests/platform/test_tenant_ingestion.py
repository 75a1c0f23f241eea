"""lib.platform.tenant_ingestion and the build lock: failures isolated, the budget and the
rotation, one build per catalog per tick, and two processes refreshing at once."""

from __future__ import annotations

import asyncio

import pytest

from lib.platform.aggregation.lock import build_lock
from lib.platform.aggregation.sources import CatalogKey
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.platform.tenant_ingestion import ROTATION_WINDOW_MS, ingest_all_tenant_scoped_feeds, rotation_offset
from lib.redis.client import get_redis
from lib.redis.commands import execute_command
from tests.support.catalogs import add_tenant, set_catalog
from tests.support.feeds import FeedServer, rss
from tests.support.processes import bundle_process, output_of
from tests.support.reliability import record
from tests.support.waiting import eventually

ITEMS = [
    ("Storm hits the coast", "https://x.example/storm", "Winds."),
    ("Election results", "https://x.example/vote", ""),
]


async def catalog(db, feed_server: FeedServer, key: str, feeds: int = 1) -> None:
    for index in range(feeds):
        feed_server.feeds[f"{key}-{index}"] = rss(key, [(f"{t} {key}", f"{u}/{key}/{index}", s) for t, u, s in ITEMS])
    await set_catalog(db, key, [feed_server.url(f"{key}-{index}") for index in range(feeds)])


async def test_a_failing_tenant_is_counted_and_the_others_refresh(
    db, redis, feed_server: FeedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    await catalog(db, feed_server, "news")
    await catalog(db, feed_server, "broken")
    await add_tenant(db, "org_ok", "news")
    await add_tenant(db, "org_bad", "broken")
    await add_tenant(db, "org_draft", "news", status="draft")
    await db.execute("UPDATE source_sets SET feeds = '\"not a list\"' WHERE key = 'broken'")
    result = await ingest_all_tenant_scoped_feeds(0)
    assert (result["tenantScopes"], result["refreshed"], result["failed"], result["skippedTimeBudget"]) == (2, 1, 1, 0)
    assert "[tenant-ingestion] refresh failed for org_bad" in capsys.readouterr().err
    assert (await (await db.execute("SELECT count(*) FROM editorial_story_drafts")).fetchone())[0] == 2


async def test_no_profiles_repository_means_no_scopes(db, set_env) -> None:
    from lib.db.pool import close_pools

    await close_pools()
    set_env(DATABASE_URL="postgresql://nobody@127.0.0.1:1/none", ERMIS_DB_CONNECT_TIMEOUT_S="1")
    result = await ingest_all_tenant_scoped_feeds(0)
    await close_pools()
    assert (result["tenantScopes"], result["refreshed"], result["failed"]) == (0, 0, 0)


def test_rotation_offset_is_the_spec_formula() -> None:
    assert rotation_offset(0, 7) == 0
    assert rotation_offset(ROTATION_WINDOW_MS * 3 + 5, 7) == 3
    assert rotation_offset(ROTATION_WINDOW_MS * 9, 7) == 2
    assert rotation_offset(123, 0) == 0


async def test_budget_cuts_a_tick_short_and_rotation_reaches_everyone(
    db, redis, feed_server: FeedServer, set_env
) -> None:
    # Each build waits 0.3 s on its feed; a 0.8 s budget fits two or so, with room for a slow CPU.
    set_env(ERMIS_TENANT_INGESTION_TIME_BUDGET_MS="800", ERMIS_FEED_BUILD_THROTTLE_S="0")
    feed_server.latency_seconds = 0.3
    tenants = [f"org_{index}" for index in range(6)]
    for tenant in tenants:
        await catalog(db, feed_server, f"cat_{tenant}")
        await add_tenant(db, tenant, f"cat_{tenant}")
    for tick in range(6):
        result = await ingest_all_tenant_scoped_feeds(tick * ROTATION_WINDOW_MS)
        assert result["refreshed"] + result["skippedTimeBudget"] == 6
        assert 0 < result["skippedTimeBudget"] < 6
    # Without the rotation every tick would start at org_0 and the tail would never get drafts.
    drafts = await (await db.execute("SELECT DISTINCT tenant_scope_id FROM editorial_story_drafts")).fetchall()
    assert {row[0] for row in drafts} == set(tenants)


async def test_fifty_tenants_on_one_catalog_cost_one_build(db, redis, feed_server: FeedServer) -> None:
    await catalog(db, feed_server, "shared", feeds=3)
    for index in range(50):
        await add_tenant(db, f"org_{index:02}", "shared")
    result = await ingest_all_tenant_scoped_feeds(0)
    assert (result["refreshed"], result["failed"]) == (50, 0)
    assert feed_server.total_fetches() == 3  # each feed fetched once: one build
    assert (await (await db.execute("SELECT count(*) FROM editorial_story_drafts")).fetchone())[0] == 100


async def test_two_processes_refreshing_at_once_build_once(db, redis, feed_server: FeedServer) -> None:
    await catalog(db, feed_server, "default", feeds=4)
    feed_server.latency_seconds = 0.5
    call = "list_aggregated_stories('global', force_refresh=True)"
    module = "lib.platform.aggregation.stories"
    with bundle_process(call, module) as first, bundle_process(call, module) as second:
        # The waiter may wait up to the lock's LOCK_WAIT_SECONDS on a loaded machine.
        for child in (first, second):
            assert await asyncio.to_thread(child.wait, 150) == 0, output_of(child)
    assert feed_server.total_fetches() == 4


@pytest.mark.reliability
async def test_a_build_killed_holding_the_lock_is_rebuilt_within_the_locks_short_lease(
    db, redis, feed_server: FeedServer, set_env
) -> None:
    """SIGKILL while building: the renewed lease lapses in LOCK_TTL_MS, not a function lifetime."""
    from lib.platform.aggregation.lock import LOCK_TTL_MS
    from tests.support.processes import sigkill

    await catalog(db, feed_server, "default")
    feed_server.modes["default-0"] = "slow"  # the child's fetch hangs inside the build
    set_env(ERMIS_FEED_TIMEOUT_S="120")
    lock_key = CatalogKey("default", "en").lock_key
    with bundle_process(
        "list_aggregated_stories('global', force_refresh=True)", "lib.platform.aggregation.stories"
    ) as child:

        async def lock_held() -> bool:
            return bool(await execute_command(get_redis(), "EXISTS", lock_key))

        assert await eventually(lock_held), output_of(child)
        await asyncio.sleep(6)  # past one renewal: the lease is being kept alive while the build runs
        assert await execute_command(get_redis(), "EXISTS", lock_key), output_of(child)
        sigkill(child)
    del feed_server.modes["default-0"]
    started = asyncio.get_running_loop().time()
    stories = await list_aggregated_stories("global", force_refresh=True)
    record("kills", "catalog build, holding the Redis build lock", entries=2, lost=2 - len(stories), doubled=0)
    assert len(stories) == 2  # nothing lost: the next caller built the catalog itself
    assert asyncio.get_running_loop().time() - started < LOCK_TTL_MS / 1000 + 10


async def test_the_lock_is_released_when_a_build_fails(db, redis) -> None:
    key = CatalogKey("default", "en").lock_key
    with pytest.raises(RuntimeError):
        async with build_lock(key) as held:
            assert held
            raise RuntimeError("build exploded")
    assert await execute_command(get_redis(), "EXISTS", key) == 0


async def test_a_crashed_holders_lock_expires_and_the_next_caller_builds(db, redis, feed_server: FeedServer) -> None:
    await catalog(db, feed_server, "default")
    lock_key = CatalogKey("default", "en").lock_key
    await execute_command(get_redis(), "SET", lock_key, "token-of-a-dead-process", "PX", 400)
    stories = await asyncio.wait_for(list_aggregated_stories("global", force_refresh=True), timeout=10)
    assert len(stories) == 2
    assert feed_server.total_fetches() == 1


async def test_only_the_owner_releases_the_lock(db, redis) -> None:
    key = CatalogKey("x", "en").lock_key
    async with build_lock(key) as held:
        assert held
        await execute_command(get_redis(), "SET", key, "someone-else", "PX", 10_000)
    assert await execute_command(get_redis(), "GET", key) == "someone-else"


@pytest.mark.reliability
async def test_with_redis_down_the_build_runs_under_the_instances_own_lock(
    db, feed_server: FeedServer, set_env, capsys: pytest.CaptureFixture[str]
) -> None:
    await catalog(db, feed_server, "default")
    set_env(REDIS_URL="redis://127.0.0.1:9/0", UPSTASH_REDIS_REST_URL=None)
    results = await asyncio.gather(*(list_aggregated_stories("global", force_refresh=True) for _ in range(3)))
    built = all(len(stories) == 2 for stories in results) and feed_server.total_fetches() == 1
    record("faults", "Redis down while the catalog build takes its lock", injected=1, recovered=int(built))
    assert built, (results, feed_server.total_fetches())
    assert "aggregation:build-lock" in capsys.readouterr().err
