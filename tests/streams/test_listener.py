"""lib.streams.listener — changes told by the detector over real Redis pub/sub: a change reaches
an open stream long before its poll would have; a change for tenant B never wakes tenant A; a
change starts the streams' shared read before it wakes them; a burst of 1,000 inserts costs at
most one read per audience per coalescing window; and the fallbacks — Redis unreachable, the
subscription cut, Postgres restarted under the detector — poll or wait, are reported once, and
return to push."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from redis.asyncio import Redis

import lib.streams.feed as feed_module
from lib.clock import Deadline
from lib.db.migrate import apply_migrations
from lib.db.pool import close_pools
from lib.local.services import EmbeddedPostgres
from lib.streams.feed import feed_frames
from lib.streams.listener import COALESCE_S, change_listener, stop_change_listener
from lib.streams.shared_reads import SharedReads
from lib.streams.watch import ChangeWatch, StreamTiming
from tests.support.auth import session_headers
from tests.support.catalogs import add_draft
from tests.support.fleet import RestartableRedis, lease_holder
from tests.support.functions import load_api_app
from tests.support.listener import SLOW_POLL, healthy_listener, keyed_read, settled
from tests.support.servers import serve_in_thread
from tests.support.sse import SseCapture, capture_sse
from tests.support.waiting import eventually

EVENTS = load_api_app("api/notifications/events.py")


async def alert(db, alert_id: str, tenant: str) -> None:
    await db.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
        " VALUES (%s, %s, 'r', %s, 'warning', 'in-app')",
        (alert_id, tenant, alert_id),
    )


@pytest.fixture
def feed_url(slow_polls) -> Iterator[str]:
    with serve_in_thread(load_api_app("api/feed/events.py")) as url:
        yield f"{url}/api/feed/events"


async def test_a_change_reaches_an_open_stream_long_before_its_poll(
    db, feed_url: str, mint_token: Callable[..., str]
) -> None:
    await add_draft(db, "org_a", "s1")
    headers = session_headers(mint_token(org_id="org_a", org_role="org:member"))
    written: list[float] = []

    async def write_later() -> None:
        await asyncio.sleep(1.5)  # the stream is open and its listener proven by now
        written.append(time.monotonic())
        await add_draft(db, "org_a", "s2")

    writer = asyncio.create_task(write_later())
    capture = await capture_sse(feed_url, headers, seconds=3.5, stop_after=2)
    arrived = time.monotonic()
    await writer
    assert [change["draftCount"] for change in capture.events("feed.changed")] == [1, 2]
    assert arrived - written[0] < 1.0  # the poll is 20 s away


async def test_a_notification_for_tenant_b_never_wakes_tenant_a(db) -> None:
    await healthy_listener()
    tenant_a = ChangeWatch(SLOW_POLL, (("drafts", "org_a"),))
    tenant_b = ChangeWatch(SLOW_POLL, (("drafts", "org_b"),))
    with tenant_a.open(), tenant_b.open():
        await settled(tenant_a, tenant_b)

        async def write_for_b() -> None:
            await asyncio.sleep(0.2)
            await add_draft(db, " ORG_B ", "s1")  # compared trimmed and lower-cased, as the reads do

        writer = asyncio.create_task(write_for_b())
        woken_b = await tenant_b.next_read_before(Deadline.after(5), "b", keyed_read(tenant_b))
        woken_a = await tenant_a.next_read_before(Deadline.after(1), "a", keyed_read(tenant_a))
        await writer
    assert woken_b is not None  # pushed
    assert woken_a is None  # slept to its deadline: nothing for tenant A


async def test_a_change_starts_the_shared_read_before_its_streams_wake(db) -> None:
    await healthy_listener()
    shared = SharedReads()
    loads: list[str] = []

    async def load() -> str:
        loads.append("load")
        await asyncio.sleep(0.05)
        return "rows"

    watches = [ChangeWatch(SLOW_POLL, (("drafts", "org_r"),)) for _ in range(3)]

    def start_read(watch: ChangeWatch) -> asyncio.Future[str]:
        return shared.start("org_r", load, 30, watch.current_key())

    async def woken_with_read_done(watch: ChangeWatch) -> bool:
        read = await watch.next_read_before(Deadline.after(5), "org_r", lambda: start_read(watch))
        return read.done()  # ready as the stream wakes, not started by it

    async def write_soon() -> None:
        await asyncio.sleep(0.2)
        await add_draft(db, "org_r", "s1")

    with contextlib.ExitStack() as stack:
        for watch in watches:
            stack.enter_context(watch.open())
        await settled(*watches)
        writer = asyncio.create_task(write_soon())
        ready_on_waking = await asyncio.gather(*(woken_with_read_done(watch) for watch in watches))
        await writer
    assert ready_on_waking == [True, True, True]
    assert loads == ["load"]  # started once for the three


async def test_a_change_made_while_its_read_ahead_runs_is_read_again(db) -> None:
    await healthy_listener()
    shared = SharedReads()
    watch = ChangeWatch(SLOW_POLL, (("drafts", "org_s"),))

    async def slow_load() -> object:
        await asyncio.sleep(0.3)  # the second change comes while this runs
        return "first"

    def start_read() -> asyncio.Future:
        return shared.start("org_s", slow_load, 30, watch.current_key())

    async def two_changes() -> None:
        await asyncio.sleep(0.2)
        await add_draft(db, "org_s", "s1")
        await asyncio.sleep(0.1)
        await add_draft(db, "org_s", "s2")

    with watch.open():
        await settled(watch)
        writer = asyncio.create_task(two_changes())
        first = await watch.next_read_before(Deadline.after(5), "org_s", start_read)
        await writer
        second = await watch.next_read_before(Deadline.after(1), "org_s", start_read)
    assert await first == "first"
    assert second is not None and second is not first  # the second change is not lost


async def test_only_a_failed_delivery_wakes_the_deliveries_of_its_tenant(db) -> None:
    await healthy_listener()
    deliveries = ChangeWatch(SLOW_POLL, (("deliveries", "org_d"),))
    alerts = ChangeWatch(SLOW_POLL, (("alerts", "org_d"),))

    async def deliver(log_id: str, status: str) -> None:
        await db.execute(
            "INSERT INTO delivery_logs (id, delivery_id, tenant_scope_id, method, response_code, endpoint, status)"
            " VALUES (%s, 'd', 'org_d', 'webhook', 200, 'https://hook', %s)",
            (log_id, status),
        )

    with deliveries.open(), alerts.open():
        await settled(deliveries, alerts)
        await deliver("ok-1", "delivered")  # a busy webhook's successes wake nobody
        assert await deliveries.next_read_before(Deadline.after(1), "d", keyed_read(deliveries)) is None
        await deliver("failed-1", "failed")
        assert await deliveries.next_read_before(Deadline.after(5), "d", keyed_read(deliveries)) is not None
        assert await alerts.next_read_before(Deadline.after(1), "a", keyed_read(alerts)) is None  # not an alert


async def test_a_burst_costs_at_most_one_read_per_audience_per_window(
    db, slow_polls, monkeypatch: pytest.MonkeyPatch
) -> None:
    await healthy_listener()
    reads: list[float] = []
    real_read = feed_module.read_draft_feed_watermark

    async def counted(tenant: str) -> dict | None:
        reads.append(time.monotonic())
        return await real_read(tenant)

    monkeypatch.setattr(feed_module, "read_draft_feed_watermark", counted)

    async def stream_until(deadline: float) -> int:
        frames = 0
        async for _ in feed_frames("org_burst"):
            frames += 1
            if time.monotonic() > deadline:
                break
        return frames

    end = time.monotonic() + 2.5
    streams = [asyncio.create_task(stream_until(end)) for _ in range(50)]
    await asyncio.sleep(0.3)
    started = time.monotonic()
    for story in range(1000):  # 1,000 inserts, each its own transaction and notification
        await add_draft(db, "org_burst", f"s{story}")
    burst_s = time.monotonic() - started
    await asyncio.gather(*streams)
    windows = burst_s / COALESCE_S + 2
    burst_reads = [at for at in reads if at >= started]
    # 50 streams, 1,000 inserts: reads follow the windows, not the streams or the rows.
    assert len(burst_reads) <= windows, (len(burst_reads), windows)
    # The 50 connections' first read, shared, and one more once their channel is followed.
    assert len(reads) - len(burst_reads) <= 2


async def test_without_redis_the_streams_poll_and_say_so_once(
    db, feed_url: str, set_env, mint_token: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No bus, so no detector either: each poll positions what committed before it reads."""
    set_env(REDIS_URL="redis://:hunter2@127.0.0.1:9/0", ERMIS_SSE_POLL_INTERVAL_MS="300")
    await add_draft(db, "org_a", "s1")
    headers = session_headers(mint_token(org_id="org_a", org_role="org:member"))

    async def write_later() -> None:
        await asyncio.sleep(1.0)
        await add_draft(db, "org_a", "s2")

    writer = asyncio.create_task(write_later())
    capture = await capture_sse(feed_url, headers, seconds=3.0, stop_after=2)
    await writer
    changes = capture.events("feed.changed")
    assert [change["draftCount"] for change in changes] == [1, 2]  # polled
    assert [int(frame["id"]) for frame in capture.frames if frame.get("event") == "feed.changed"][1] > 0
    reports = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if '"context": "streams:listen"' in line
    ]
    assert len(reports) == 1 and reports[0]["fallback"] == "polling"
    assert "hunter2" not in json.dumps(reports)


async def test_a_cut_subscription_loses_no_change(db, redis_url: str, set_env) -> None:
    """The subscription's connection is killed (``CLIENT KILL``) with a change committed right
    after: the client reconnects and subscribes again, and each channel's confirmation makes its
    streams read — what was told while it was away is read, with polls 20 s away."""
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="20000", ERMIS_SSE_SAFETY_POLL_S="60")
    listener = change_listener()
    watch = ChangeWatch(StreamTiming(20, 30), (("drafts", "org_k"),))
    with watch.open():
        assert await eventually(lambda: asyncio.sleep(0, result=listener.healthy), timeout_s=10)
        await settled(watch)
        async with Redis.from_url(redis_url) as admin:
            assert await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub") >= 1
        await add_draft(db, "org_k", "s1")  # while the subscription is gone or coming back
        woken = await watch.next_read_before(Deadline.after(5), "k", keyed_read(watch))
        assert woken is not None  # read within seconds: neither a poll nor the safety net
        await settled(watch)

        async def write_soon() -> None:
            await asyncio.sleep(0.2)
            await add_draft(db, "org_k", "s2")

        writer = asyncio.create_task(write_soon())
        pushed = await watch.next_read_before(Deadline.after(5), "k", keyed_read(watch))
        await writer
    assert pushed is not None and (await pushed)[0] == "push"


@pytest.fixture
async def restartable_postgres(tmp_path: Path, set_env) -> AsyncIterator[tuple[EmbeddedPostgres, str]]:
    """A Postgres of this test's own (the suite's cannot be restarted under the other tests), which
    the bundle uses for the test."""
    postgres = EmbeddedPostgres(tmp_path / "postgres", "ermis_restart")
    url = await asyncio.to_thread(postgres.start)
    await asyncio.to_thread(apply_migrations, url)
    set_env(DATABASE_URL=url)
    try:
        yield postgres, url
    finally:
        await stop_change_listener()
        await close_pools()
        await asyncio.to_thread(postgres.stop)


async def test_postgres_restarted_under_the_detector_it_reports_once_and_pushes_again(
    restartable_postgres: tuple[EmbeddedPostgres, str], set_env, capsys: pytest.CaptureFixture[str]
) -> None:
    postgres, url = restartable_postgres
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="300", ERMIS_SSE_SAFETY_POLL_S="60", ERMIS_SSE_MAX_DURATION_S="120")
    listener = change_listener()
    counts: list[int] = []

    async def hold_feed_stream() -> None:
        async for frame in feed_frames("org_r"):
            if frame.startswith(b"id:"):
                counts.append(json.loads(frame.split(b"data: ", 1)[1].split(b"\r\n", 1)[0])["draftCount"])

    async def write_draft(story: str) -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await add_draft(conn, "org_r", story)

    async def seen(count: int) -> bool:
        return bool(counts) and counts[-1] == count

    stream = asyncio.create_task(hold_feed_stream())
    watch = ChangeWatch(StreamTiming(0.3, 120), (("drafts", "org_r"),))
    try:
        with watch.open():
            assert await eventually(lambda: asyncio.sleep(0, result=listener.healthy), timeout_s=10)
            await write_draft("s1")
            assert await eventually(lambda: seen(1), timeout_s=5)

            await asyncio.to_thread(postgres.stop)
            await asyncio.sleep(1.0)  # the detector's rounds and the stream's reads fail meanwhile
            assert not stream.done()
            assert listener.healthy  # the bus is up: push stays on, the detector is what waits

            assert await asyncio.to_thread(postgres.start) == url
            await settled(watch)
            await write_draft("s2")
            pushed = await watch.next_read_before(Deadline.after(10), "k", keyed_read(watch))
            assert pushed is not None and (await pushed)[0] == "push"  # the detector is back
            assert await eventually(lambda: seen(2), timeout_s=10)
            assert not stream.done()
    finally:
        stream.cancel()
    reports = [line for line in capsys.readouterr().err.splitlines() if '"context": "streams:detector"' in line]
    assert len(reports) == 1  # one outage, one report, however many reconnects it took


async def _has_leader(redis_url: str, database_url: str) -> bool:
    return await lease_holder(redis_url, database_url) is not None


async def test_redis_stopped_and_restarted_under_streams_on_two_processes_loses_nothing(
    db, database_url: str, set_env, mint_token: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two stream servers (two event loops: two subscriptions, two candidates) each hold a
    notification stream of one tenant; Redis is killed, alerts are written while it is down, and
    it comes back on the same port. Polls are 20 s away, so what the streams get while and after
    it is down comes from the health change and push: each stream gets every alert once, each
    server reports the outage once, and the alert after it arrives pushed."""
    redis = RestartableRedis()
    redis.start()
    set_env(REDIS_URL=redis.url, ERMIS_SSE_POLL_INTERVAL_MS="20000", ERMIS_SSE_MAX_DURATION_S="60")
    headers = session_headers(mint_token(sub="user_r", org_id="org_redis", org_role="org:owner"))
    captures = [SseCapture(), SseCapture()]

    def alerts_in(capture: SseCapture) -> list[str]:
        return [item["id"] for item in capture.events("alert.triggered") if not item["initial"]]

    async def everywhere(ids: list[str]) -> bool:
        return all(alerts_in(capture) == ids for capture in captures)

    try:
        with serve_in_thread(EVENTS) as url_a, serve_in_thread(EVENTS) as url_b:
            streams = [
                asyncio.create_task(capture_sse(f"{url}/api/notifications/events", headers, 60.0, into=capture))
                for url, capture in zip((url_a, url_b), captures, strict=True)
            ]
            assert await eventually(lambda: asyncio.sleep(0, result=all(c.frames for c in captures)), timeout_s=10)
            await asyncio.sleep(1.0)  # both subscribed, one detector leading
            await alert(db, "before", "org_redis")
            assert await eventually(lambda: everywhere(["before"]), timeout_s=5)

            await asyncio.to_thread(redis.stop)
            await asyncio.sleep(1.0)
            await alert(db, "during-1", "org_redis")
            await asyncio.sleep(0.5)
            await alert(db, "during-2", "org_redis")
            await asyncio.sleep(1.0)
            await asyncio.to_thread(redis.start)
            assert await eventually(lambda: everywhere(["before", "during-1", "during-2"]), timeout_s=20)

            # The subscriptions are back (the alerts during the outage came through them); a
            # detector leads again once its backoff is over.
            assert await eventually(lambda: _has_leader(redis.url, database_url), timeout_s=10)
            written = time.monotonic()
            await alert(db, "after", "org_redis")
            assert await eventually(lambda: everywhere(["before", "during-1", "during-2", "after"]), timeout_s=5), [
                alerts_in(capture) for capture in captures
            ]
            pushed_in = time.monotonic() - written
            for stream in streams:
                stream.cancel()
    finally:
        redis.stop()
    assert pushed_in < 3.0  # pushed: the poll is 20 s away
    reports = [line for line in capsys.readouterr().err.splitlines() if '"context": "streams:listen"' in line]
    assert len(reports) == 2  # one outage per server, one report each
