"""lib.platform.aggregation: parse, cluster, and the build behind list_aggregated_stories
against feeds served on loopback — conditional GETs, failing sources, shared builds."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from lib.db.state_store import set_state
from lib.platform.aggregation.cluster import cluster_items
from lib.platform.aggregation.parse import InvalidFeed, parse_feed
from lib.platform.aggregation.sources import GLOBAL_SCOPE
from lib.platform.aggregation.stories import list_aggregated_stories, peek_tenant_scoped_aggregated_stories
from lib.platform.alerts.rules import rules_key
from lib.runtime.after_response import wait_for_detached_work
from tests.support.auth import session_headers
from tests.support.catalogs import add_tenant, set_catalog
from tests.support.env import allow_egress
from tests.support.feeds import FeedServer, rss
from tests.support.functions import client_for, load_api_app
from tests.support.outbound import MALFORMED_URLS, Receiver
from tests.support.security import record
from tests.support.servers import serve_in_thread

TOKEN = "tok_9f8e7d6c5b4a"  # what a catalog's feed URL may carry
QUAKE = [
    ("Earthquake strikes off the coast of Chile", "https://a.example/quake", "A 7.1 quake hit at dawn."),
    ("Markets rally as inflation cools", "https://a.example/markets", "Stocks rose."),
]
QUAKE_TOO = [
    ("Strong earthquake strikes off Chile coast", "https://b.example/chile-quake", "Tsunami warning issued."),
    ("New species of frog found in Peru", "https://b.example/frog", "Scientists named it."),
]


def test_parse_normalises_items_and_rejects_non_feeds() -> None:
    items = parse_feed(rss("A", [("<b>Bold</b> &amp; title", "https://x/1", "<p>Some <i>html</i></p>")]).encode(), "A")
    assert [(item.title, item.summary, item.source) for item in items] == [("Bold & title", "Some html", "A")]
    assert items[0].published_at is not None
    with pytest.raises(InvalidFeed):
        parse_feed(b"this is { not xml", "B")


def test_clustering_groups_reports_of_one_story_deterministically() -> None:
    items = parse_feed(rss("A", QUAKE).encode(), "A") + parse_feed(rss("B", QUAKE_TOO).encode(), "B")
    clusters = cluster_items(items)
    assert sorted(len(cluster.items) for cluster in clusters) == [1, 1, 2]
    again = cluster_items(list(reversed(items)))
    assert [c.story_id for c in clusters] == [c.story_id for c in again]
    quake = next(c for c in clusters if len(c.items) == 2)
    assert {item.source for item in quake.items} == {"A", "B"}


async def test_build_fetches_clusters_synthesises_and_records_usage(db, redis, feed_server: FeedServer) -> None:
    feed_server.feeds.update(a=rss("A", QUAKE), b=rss("B", QUAKE_TOO))
    await set_catalog(db, "default", [feed_server.url("a"), feed_server.url("b")])
    assert await peek_tenant_scoped_aggregated_stories(GLOBAL_SCOPE) is None
    stories = await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    assert len(stories) == 3
    quake = next(story for story in stories if len(story["sources"]) == 2)
    assert quake["headline"] == "Earthquake strikes off the coast of Chile"
    assert "Reported by 2 sources" in quake["summary"]
    assert await peek_tenant_scoped_aggregated_stories(GLOBAL_SCOPE) == stories
    await wait_for_detached_work()
    cursor = await db.execute(
        "SELECT count(*), sum(input_tokens) > 0 FROM ai_usage_ledger WHERE id LIKE 'synthesis:%%'"
    )
    assert tuple(await cursor.fetchone()) == (3, True)


async def test_a_rebuild_is_conditional_and_resynthesises_only_what_changed(
    db, redis, feed_server: FeedServer, set_env
) -> None:
    set_env(ERMIS_FEED_BUILD_THROTTLE_S="0")
    feed_server.feeds.update(a=rss("A", QUAKE), b=rss("B", QUAKE_TOO))
    await set_catalog(db, "default", [feed_server.url("a"), feed_server.url("b")])
    first = await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    feed_server.feeds["b"] = rss("B", [*QUAKE_TOO, ("Volcano erupts in Iceland", "https://b.example/volcano", "Ash.")])
    second = await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    assert feed_server.not_modified["a"] == 1  # feed a answered 304 and its items were reused
    assert len(second) == len(first) + 1
    await wait_for_detached_work()
    cursor = await db.execute("SELECT count(*) FROM ai_usage_ledger WHERE id LIKE 'synthesis:%%'")
    assert (await cursor.fetchone())[0] == 4  # 3, then only the new story


@pytest.mark.parametrize("mode", ["slow", "error", "huge", "invalid"])
async def test_a_broken_source_is_counted_and_the_build_goes_on(db, redis, feed_server: FeedServer, mode: str) -> None:
    feed_server.feeds.update(a=rss("A", QUAKE))
    feed_server.modes["broken"] = mode
    await set_catalog(db, "default", [feed_server.url("a"), feed_server.url("broken")])
    stories = await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    assert len(stories) == 2
    cached = await (
        await db.execute("SELECT value FROM platform_state WHERE key LIKE 'platform:feed-cache:%%'")
    ).fetchone()
    build = cached[0]
    assert build["stats"]["failedFeeds"] == 1
    assert build["feeds"][feed_server.url("broken")]["status"] == "failed"
    assert build["feeds"][feed_server.url("a")]["status"] == "ok"


async def test_tenant_drafts_follow_the_shared_build(db, redis, feed_server: FeedServer, set_env) -> None:
    set_env(ERMIS_FEED_BUILD_THROTTLE_S="0")
    feed_server.feeds.update(a=rss("A", QUAKE))
    await set_catalog(db, "default", [feed_server.url("a")])
    await add_tenant(db, "org_a")
    await list_aggregated_stories("org_a", force_refresh=True, bootstrap_refresh="never")
    rows = await (await db.execute("SELECT story_id, status, phase, updated_at FROM editorial_story_drafts")).fetchall()
    assert len(rows) == 2 and {row[1] for row in rows} == {"review"}
    await db.execute("UPDATE editorial_story_drafts SET status = 'published' WHERE headline LIKE 'Markets%%'")
    feed_server.feeds["a"] = rss("A", [(QUAKE[0][0], QUAKE[0][1], "Updated: 7.3 magnitude."), QUAKE[1]])
    await list_aggregated_stories("org_a", force_refresh=True, bootstrap_refresh="never")
    after = {
        row[0]: row
        for row in await (
            await db.execute("SELECT story_id, summary, updated_at, status FROM editorial_story_drafts")
        ).fetchall()
    }
    before = {row[0]: row[3] for row in rows}
    moved = [story for story, row in after.items() if row[2] > before[story]]
    assert len(moved) == 1 and "7.3" in after[moved[0]][1]


async def test_bootstrap_never_does_not_build(db, redis, feed_server: FeedServer) -> None:
    feed_server.feeds.update(a=rss("A", QUAKE))
    await set_catalog(db, "default", [feed_server.url("a")])
    await add_tenant(db, "org_a")
    assert await list_aggregated_stories("org_a", bootstrap_refresh="never") == []
    assert feed_server.total_fetches() == 0
    assert len(await list_aggregated_stories("org_a")) == 2


async def test_a_malformed_or_refused_feed_url_fails_alone_and_the_catalog_is_built(
    db, redis, feed_server: FeedServer
) -> None:
    """Before the egress guard, one feed URL with a control character failed the whole build
    (``httpx.InvalidURL`` is not an ``httpx.HTTPError``) on every tick, for every tenant."""
    feed_server.feeds.update(a=rss("A", QUAKE))
    await set_catalog(db, "default", [*MALFORMED_URLS, feed_server.url("a")])
    stories = await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    assert len(stories) == 2
    build = (
        await (await db.execute("SELECT value FROM platform_state WHERE key LIKE 'platform:feed-cache:%%'")).fetchone()
    )[0]
    assert build["feeds"][feed_server.url("a")]["status"] == "ok"
    assert {
        url: (state["status"], state["error"]) for url, state in build["feeds"].items() if url in MALFORMED_URLS
    } == {url: ("failed", detail) for url, detail in MALFORMED_URLS.items()}


async def test_redirects_are_followed_up_to_five_hops(db, redis, feed_server: FeedServer) -> None:
    feed_server.feeds.update(a=rss("A", QUAKE))
    for hop in range(6):  # hop0 -> hop1 -> ... -> hop5 -> a: six redirects
        feed_server.redirects[f"hop{hop}"] = feed_server.url(f"hop{hop + 1}" if hop < 5 else "a")
    await set_catalog(db, "default", [feed_server.url("hop1"), feed_server.url("hop0")])
    await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    build = (
        await (await db.execute("SELECT value FROM platform_state WHERE key LIKE 'platform:feed-cache:%%'")).fetchone()
    )[0]
    assert build["feeds"][feed_server.url("hop1")]["status"] == "ok"  # five hops
    assert (build["feeds"][feed_server.url("hop0")]["status"], build["feeds"][feed_server.url("hop0")]["error"]) == (
        "failed",
        "more than 5 redirects",
    )
    assert feed_server.fetches["a"] == 1


@pytest.mark.security
async def test_an_unnamed_feed_s_url_secrets_reach_no_member_and_no_webhook_receiver(
    db, redis, set_env, feed_server: FeedServer, mint_token: Callable[..., str]
) -> None:
    """Two unnamed feeds whose URLs carry a token (query) and a fragment report one story: the
    synthesis names both sources, and nothing members read — drafts, the REST snapshots, in-app
    alerts, delivery logs — nor the webhook receiver's payload holds either; the sources are
    shown as scheme://host/path (credentials in a URL: ``test_display_url_…``)."""
    feed_server.feeds["a"], feed_server.feeds["b"] = rss("A", QUAKE), rss("B", QUAKE_TOO)
    host = feed_server.base_url.removeprefix("http://")
    urls = [f"{feed_server.url('a')}?token={TOKEN}", f"{feed_server.url('b')}?key={TOKEN}x&v=2#{TOKEN}y"]
    await db.execute(
        "UPDATE source_sets SET feeds = %s::jsonb WHERE key = 'default'", (json.dumps([{"url": u} for u in urls]),)
    )
    await add_tenant(db, "org_a", "default")
    receiver = Receiver(200)
    with serve_in_thread(receiver.app) as hook_url:
        allow_egress(set_env, hook_url, feed_server.base_url)
        rules = [
            {"id": "app", "keywords": ["earthquake"], "channel": "in-app"},
            {"id": "hook", "keywords": ["earthquake"], "channel": "webhook", "endpoint": f"{hook_url}/hook"},
        ]
        await set_state(rules_key("org_a"), rules)
        stories = await list_aggregated_stories("org_a", force_refresh=True)
        await wait_for_detached_work()
    quake = next(story for story in stories if len(story["sources"]) == 2)
    shown = {source["source"] for source in quake["sources"]}
    assert shown == {f"http://{host}/feeds/a.xml", f"http://{host}/feeds/b.xml"}
    assert "Reported by 2 sources" in quake["summary"]

    readable = [json.dumps(stories)] + [body.decode() for _, body in receiver.received]
    for table in ("editorial_story_drafts", "alert_history", "notifications", "delivery_logs", "webhook_deliveries"):
        rows = await (await db.execute(f"SELECT row_to_json(t)::text FROM {table} AS t")).fetchall()
        readable += [row[0] for row in rows]
    member = session_headers(mint_token(org_id="org_a", org_role="org:member"))
    async with client_for(load_api_app("api/feed/index.py")) as client:
        readable.append((await client.get("/api/feed", headers=member)).text)
    async with client_for(load_api_app("api/stories/[storyId]/index.py")) as client:
        readable.append((await client.get(f"/api/stories/{quake['id']}", headers=member)).text)
    assert len(receiver.received) == 1 and any("Reported by 2 sources" in text for text in readable[1:])
    leaks = [text for text in readable if TOKEN in text]
    case = "an unnamed feed's URL token and fragment, in what members read"
    record("outbound", case, tried=len(readable),
           bad=len(leaks))  # fmt: skip
    assert leaks == []
