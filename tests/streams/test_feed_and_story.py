"""The feed and story streams over a real socket: headers, frames, silence when nothing moved,
204 without a tenant, the story's snapshot, changes, misses and 404; and their REST fallbacks."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.platform.editorial import find_story_draft, list_tenant_drafts
from lib.streams.feed import feed_frames, shared_watermarks
from lib.streams.story import story_frames
from tests.support.auth import session_headers
from tests.support.catalogs import add_draft
from tests.support.functions import client_for, load_api_app
from tests.support.listener import healthy_listener
from tests.support.reliability import record
from tests.support.servers import serve_in_thread
from tests.support.sse import capture_sse
from tests.support.waiting import eventually

FEED_EVENTS = load_api_app("api/feed/events.py")
STORY_EVENTS = load_api_app("api/stories/[storyId]/events.py")
SPEC_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache, no-transform",
    "connection": "keep-alive",
    "x-accel-buffering": "no",
}


@pytest.fixture
def fast_streams(set_env) -> None:
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="100", ERMIS_SSE_MAX_DURATION_S="3")


@pytest.fixture
def feed_url(fast_streams) -> Iterator[str]:
    with serve_in_thread(FEED_EVENTS) as url:
        yield f"{url}/api/feed/events"


@pytest.fixture
def story_base(fast_streams) -> Iterator[str]:
    with serve_in_thread(STORY_EVENTS) as url:
        yield url


async def test_feed_stream_sends_the_watermark_when_it_moves(db, feed_url: str, mint_token: Callable[..., str]) -> None:
    await add_draft(db, "org_a", "s1")
    headers = session_headers(mint_token(org_id="org_a", org_role="org:member"))

    async def write_later() -> None:
        await asyncio.sleep(0.6)
        await add_draft(db, "org_a", "s2")
        await add_draft(db, "org_b", "s3")  # another tenant: never seen here

    writer = asyncio.create_task(write_later())
    capture = await capture_sse(feed_url, headers, seconds=2.0)
    await writer
    assert capture.status == 200
    assert {key: capture.headers[key] for key in SPEC_HEADERS} == SPEC_HEADERS
    changes = capture.events("feed.changed")
    assert [change["draftCount"] for change in changes] == [1, 2]  # silent while nothing moved
    assert all(frame.get("id") for frame in capture.frames)
    assert capture.frames[0].get("retry") == "3000"


async def test_feed_stream_without_a_tenant_is_204(db, feed_url: str, mint_token: Callable[..., str]) -> None:
    capture = await capture_sse(feed_url, session_headers(mint_token(platform_role="ops")), seconds=2.0)
    assert capture.status == 204 and capture.frames == []


async def test_feed_stream_self_closes(db, feed_url: str, mint_token: Callable[..., str], set_env) -> None:
    set_env(ERMIS_SSE_MAX_DURATION_S="0.5")
    capture = await capture_sse(feed_url, session_headers(mint_token(org_id="org_a")), seconds=5.0)
    assert capture.closed_by_server


async def test_watermark_reads_are_coalesced_per_tenant(db) -> None:
    calls: list[str] = []

    async def loader() -> dict:
        calls.append("read")
        await asyncio.sleep(0.05)
        return {"latestUpdatedAt": None, "draftCount": 0}

    results = await asyncio.gather(*(shared_watermarks.read("org_x", loader, 3.5) for _ in range(50)))
    assert len(calls) == 1 and len(results) == 50

    async def failing() -> dict:
        calls.append("fail")
        raise RuntimeError("db down")

    with pytest.raises(RuntimeError):
        await shared_watermarks.read("org_y", failing, 3.5)
    with pytest.raises(RuntimeError):
        await shared_watermarks.read("org_y", failing, 3.5)  # a rejected read is not shared for a window
    assert calls.count("fail") == 2


async def test_story_stream_snapshot_then_changes_then_misses_close_it(
    db, story_base: str, mint_token: Callable[..., str]
) -> None:
    await add_draft(db, "org_a", "s1")
    headers = session_headers(mint_token(org_id="org_a", org_role="org:member"))

    async def change_then_delete() -> None:
        await asyncio.sleep(0.5)
        await db.execute(
            "UPDATE editorial_story_drafts SET status = 'published', updated_at = now() WHERE story_id = 's1'"
        )
        await asyncio.sleep(0.5)
        await db.execute("DELETE FROM editorial_story_drafts WHERE story_id = 's1'")

    writer = asyncio.create_task(change_then_delete())
    capture = await capture_sse(f"{story_base}/api/stories/s1/events", headers, seconds=5.0)
    await writer
    phases = capture.events("story.phase")
    assert [(phase["storyId"], phase["status"]) for phase in phases] == [("s1", "review"), ("s1", "published")]
    assert set(phases[0]) == {"storyId", "phase", "status", "updatedAt"}
    assert capture.closed_by_server  # three misses after the delete


async def test_story_stream_refuses_other_tenants_and_unknown_stories(
    db, story_base: str, mint_token: Callable[..., str]
) -> None:
    await add_draft(db, "org_a", "s1")
    other = session_headers(mint_token(org_id="org_b", org_role="org:owner"))
    assert (await capture_sse(f"{story_base}/api/stories/s1/events", other, seconds=2)).status == 404
    reader = session_headers(mint_token(org_id="org_a"))  # no org role: no canEditStories
    assert (await capture_sse(f"{story_base}/api/stories/s1/events", reader, seconds=2)).status == 403
    admin = session_headers(mint_token(platform_role="super_admin"))
    capture = await capture_sse(f"{story_base}/api/stories/s1/events", admin, seconds=2, stop_after=1)
    assert capture.events("story.phase")[0]["storyId"] == "s1"


async def test_rest_fallbacks(db, mint_token: Callable[..., str]) -> None:
    await add_draft(db, "org_a", "s1")
    await add_draft(db, "org_b", "s2")
    member = session_headers(mint_token(org_id="org_a", org_role="org:member"))
    async with client_for(load_api_app("api/feed/index.py")) as client:
        body = (await client.get("/api/feed", headers=member)).json()
        assert [draft["storyId"] for draft in body["drafts"]] == ["s1"] and body["watermark"]["draftCount"] == 1
        await add_draft(db, "org_a", "s3")
        moved = (await client.get("/api/feed", headers=member)).json()
        assert moved["position"] > body["position"]  # what the client keys its refetch on
        assert (await client.get("/api/feed")).status_code == 401
    async with client_for(load_api_app("api/stories/[storyId]/index.py")) as client:
        story = (await client.get("/api/stories/s1", headers=member)).json()
        assert story["phase"]["status"] == "review"
        assert (await client.get("/api/stories/s2", headers=member)).status_code == 404


async def test_the_story_id_comes_from_the_query_first_then_the_path(db, mint_token: Callable[..., str]) -> None:
    """Vercel rewrites /api/stories/s1 to /api/stories/[storyId]?storyId=s1; either path may arrive."""
    await add_draft(db, "org_a", "s1")
    member = session_headers(mint_token(org_id="org_a", org_role="org:member"))
    async with client_for(load_api_app("api/stories/[storyId]/index.py")) as client:
        for path in ("/api/stories/s1", "/api/stories/%5BstoryId%5D?storyId=s1", "/api/stories/s2?storyId=s1"):
            response = await client.get(path, headers=member)
            assert response.status_code == 200 and response.json()["story"]["storyId"] == "s1", path


@pytest.mark.reliability
async def test_the_story_stream_closes_by_its_self_close_even_while_a_read_hangs(
    db, story_base: str, database_url: str, mint_token: Callable[..., str], set_env
) -> None:
    """A read stuck behind a lock cannot hold the stream past its self-close (and maxDuration)."""
    import psycopg

    set_env(ERMIS_SSE_MAX_DURATION_S="1.5")
    await add_draft(db, "org_a", "s1")
    headers = session_headers(mint_token(org_id="org_a", org_role="org:member"))

    async def lock_the_drafts() -> None:
        await asyncio.sleep(0.4)
        async with await psycopg.AsyncConnection.connect(database_url) as locker, locker.transaction():
            await locker.execute("LOCK TABLE editorial_story_drafts IN ACCESS EXCLUSIVE MODE")
            await asyncio.sleep(4)

    locker = asyncio.create_task(lock_the_drafts())
    started = time.monotonic()
    capture = await capture_sse(f"{story_base}/api/stories/s1/events", headers, seconds=6.0)
    closed_after = time.monotonic() - started
    await locker
    closed_in_time = capture.closed_by_server and closed_after < 3.0
    record("faults", "database locked while a story stream reads", injected=1, recovered=int(closed_in_time))
    assert capture.closed_by_server and closed_after < 3.0, closed_after
    assert [phase["storyId"] for phase in capture.events("story.phase")] == ["s1"]


@pytest.mark.reliability
async def test_an_open_feed_stream_rides_out_a_database_restart(
    db, feed_url: str, database_url: str, mint_token: Callable[..., str], set_env
) -> None:
    """Every connection killed and refused for a while, as in a restart: the stream skips those
    ticks, then delivers the next change on the same connection — no reconnect at all."""
    import psycopg

    set_env(ERMIS_SSE_MAX_DURATION_S="8")
    await add_draft(db, "org_a", "s1")
    headers = session_headers(mint_token(org_id="org_a", org_role="org:member"))
    name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    admin_url = psycopg.conninfo.make_conninfo(database_url, dbname="postgres")

    async def restart_then_write() -> None:
        await asyncio.sleep(1.0)
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as admin:
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            await asyncio.sleep(1.5)  # down
            await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as writer:
            await writer.execute(
                "INSERT INTO editorial_story_drafts (id, tenant_scope_id, story_id, headline, status, phase)"
                " VALUES ('org_a:s2', 'org_a', 's2', 'After the restart', 'review', 'synthesized')"
            )

    restarter = asyncio.create_task(restart_then_write())
    capture = await capture_sse(feed_url, headers, seconds=7.0, stop_after=2)
    await restarter
    counts = [change["draftCount"] for change in capture.events("feed.changed")]
    record("faults", "database restarted under an open feed stream", injected=1, recovered=int(counts == [1, 2]))
    assert counts == [1, 2] and not capture.closed_by_server


# A writer of one tenant's drafts: which of three stories it writes, whether it inserts a new
# draft instead, the phase it sets, how long it waits before writing and before committing, and
# whether it rolls back instead.
draft_writer = st.tuples(
    st.integers(0, 2),
    st.booleans(),
    st.sampled_from(["ingested", "clustered", "synthesized"]),
    st.floats(0, 0.3),
    st.floats(0, 0.3),
    st.booleans(),
)
LISTENERS = {"pushed": {}, "polled": {"REDIS_URL": "redis://127.0.0.1:9/0"}}  # polled: no bus
draft_races = itertools.count()


async def follow(frames: AsyncIterator[bytes], on_frame: Callable[[dict], object]) -> None:
    """What a client does with a stream: each frame's data, handed to ``on_frame`` (awaited)."""
    async for chunk in frames:
        for frame in chunk.decode().split("\r\n\r\n")[:-1]:
            fields = dict(line.split(": ", 1) for line in frame.splitlines() if not line.startswith(":"))
            if "data" in fields:
                await on_frame(json.loads(fields["data"]))


@pytest.mark.parametrize("listener", LISTENERS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writers=st.lists(draft_writer, min_size=8, max_size=10))
async def test_racing_draft_writers_never_leave_the_feed_or_the_story_stale(
    db, database_url: str, set_env, listener: str, writers: list
) -> None:
    """Writers update and insert a tenant's drafts in transactions that overlap and commit in any
    order — one that started first (an older updated_at) often commits last — while a client
    holds the feed stream and refetches the drafts on each feed.changed, and holds a story
    stream. When the writers are done, both have caught up: the client's list is the tenant's
    drafts and the story stream's last phase is the story's. (Before positions, the feed stayed
    silent after a late commit that moved neither max(updated_at) nor the count.)"""
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="100", ERMIS_SSE_MAX_DURATION_S="30", **LISTENERS[listener])
    tenant = f"org_drafts_{listener}_{next(draft_races)}"
    for story in range(3):
        await add_draft(db, tenant, f"s{story}")
    feed_view: list[dict] = []
    story_view: list[dict] = []

    async def refetch(_watermark: dict) -> None:
        feed_view[:] = await list_tenant_drafts(tenant)

    async def phase(payload: dict) -> None:
        story_view.append(payload)

    async def write(index: int, story: int, insert: bool, phase: str, before: float, hold: float, rollback: bool):
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await asyncio.sleep(before)
            if insert:
                await add_draft(conn, tenant, f"new-{index}", phase)
            else:
                await conn.execute(
                    "UPDATE editorial_story_drafts SET phase = %s, headline = %s, updated_at = now()"
                    " WHERE tenant_scope_id = %s AND story_id = %s",
                    (phase, f"by writer {index}", tenant, f"s{story}"),
                )
            await asyncio.sleep(hold)
            await (conn.rollback() if rollback and index % 3 == 0 else conn.commit())

    async def caught_up() -> bool:
        story = await find_story_draft("s0", tenant)
        return feed_view == await list_tenant_drafts(tenant) and story_view[-1]["phase"] == story["phase"]

    clients = [
        asyncio.create_task(follow(feed_frames(tenant), refetch)),
        asyncio.create_task(follow(story_frames("s0", tenant), phase)),
    ]
    try:
        assert await eventually(lambda: asyncio.sleep(0, result=bool(feed_view and story_view)), timeout_s=5)
        await asyncio.gather(*(write(index, *plan) for index, plan in enumerate(writers)))
        assert await eventually(caught_up, timeout_s=3), (feed_view, story_view[-1])
    finally:
        for client in clients:
            client.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await client


async def first_feed_frame(tenant: str) -> dict:
    """A new connection's first frame of the feed stream, in this process."""
    async with contextlib.aclosing(feed_frames(tenant)) as frames:
        async for frame in frames:
            text = frame.decode()
            if "feed.changed" in text:
                return json.loads(text.split("data: ", 1)[1].split("\n", 1)[0])
    raise AssertionError("no feed.changed")


async def test_a_connection_s_first_frame_is_current_after_a_gap_nobody_heard(db, redis) -> None:
    """Close the tenant's last stream, commit drafts while no stream of this process follows the
    tenant (so it hears nothing of them), open a stream within the sharing window: its first
    frame counts them — a read shared before the connection was accepted never answers it."""
    await healthy_listener()
    await add_draft(db, "org_gap", "s1")
    assert (await first_feed_frame("org_gap"))["draftCount"] == 1
    for story in ("s2", "s3", "s4"):
        await add_draft(db, "org_gap", story)
    assert (await first_feed_frame("org_gap"))["draftCount"] == 4
