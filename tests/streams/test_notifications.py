"""The notification stream over a real socket: replay, per-event authorization across tenants,
the review read never issued without the capability, Last-Event-ID resume, the REST-polling
flag, payloads that could break a frame, and the REST fallback."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.jobs.state_cleanup import cleanup_platform_state
from lib.platform.alerts.evaluation import evaluate_alert_rules
from lib.platform.alerts.rules import AlertRule
from lib.platform.flags import set_feature_flag
from lib.streams.bus import RedisBus
from lib.streams.notification_reads import PAGE_SIZE, Audience
from lib.streams.notifications import notification_frames
from tests.support.auth import session_headers
from tests.support.devserver import dev_token, running_dev_server
from tests.support.eventsource_race import eventsource_client, race_alerts_and_notifications
from tests.support.functions import client_for, load_api_app
from tests.support.listener import healthy_listener
from tests.support.servers import serve_in_thread
from tests.support.sse import SseCapture, capture_sse
from tests.support.waiting import eventually

EVENTS = load_api_app("api/notifications/events.py")


@pytest.fixture
def stream_url(set_env) -> Iterator[str]:
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="100", ERMIS_SSE_MAX_DURATION_S="5")
    with serve_in_thread(EVENTS) as url:
        yield f"{url}/api/notifications/events"


async def alert(db, alert_id: str, tenant: str, minutes_ago: float = 0, title: str = "Alert") -> None:
    await db.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel, delivered_at)"
        " VALUES (%s, %s, 'r', %s, %s, 'warning', 'in-app', now() - %s * interval '1 minute')",
        (alert_id, tenant, f"story-{alert_id}", title, minutes_ago),
    )


async def review(db, event_id: str, tenant: str | None, action: str = "approved", headline: str = "H") -> None:
    await db.execute(
        "INSERT INTO review_status_events (id, tenant_scope_id, story_id, headline, action)"
        " VALUES (%s, %s, 's', %s, %s)",
        (event_id, tenant, headline, action),
    )


async def failed_delivery(db, log_id: str, tenant: str) -> None:
    await db.execute(
        "INSERT INTO delivery_logs (id, delivery_id, tenant_scope_id, method, response_code, endpoint, status)"
        " VALUES (%s, 'd', %s, 'webhook', 500, 'https://hook', 'failed')",
        (log_id, tenant),
    )


async def notification(db, notification_id: str, user: str) -> None:
    await db.execute(
        "INSERT INTO notifications (id, user_id, title, body, type) VALUES (%s, %s, 'T', 'B', 'system')",
        (notification_id, user),
    )


def owner(mint_token: Callable[..., str], tenant: str = "org_a", sub: str = "user_a") -> dict[str, str]:
    return session_headers(mint_token(sub=sub, org_id=tenant, org_role="org:owner"))


async def test_connect_replays_twenty_oldest_first_then_streams_new_events(
    db, stream_url: str, mint_token: Callable[..., str]
) -> None:
    for index in range(25):
        await alert(db, f"a{index:02}", "org_a", minutes_ago=100 - index)
    await review(db, "r1", "org_a")
    await failed_delivery(db, "d1", "org_a")
    await notification(db, "n-old", "user_a")

    async def later() -> None:
        await asyncio.sleep(0.8)
        await notification(db, "n-new", "user_a")
        await alert(db, "a-new", "org_a")

    writer = asyncio.create_task(later())
    capture = await capture_sse(stream_url, owner(mint_token), seconds=2.0)
    await writer
    alerts = capture.events("alert.triggered")
    replayed = [a for a in alerts if a["initial"]]
    assert [a["id"] for a in replayed] == [f"a{index:02}" for index in range(5, 25)]  # 20 most recent, oldest first
    assert [a["id"] for a in alerts if not a["initial"]] == ["a-new"]
    assert [(r["id"], r["initial"]) for r in capture.events("review.status.changed")] == [("r1", True)]
    assert [(d["id"], d["initial"]) for d in capture.events("delivery.failed")] == [("d1", True)]
    assert [(n["id"], n["initial"]) for n in capture.events("notification.created")] == [("n-new", False)]
    assert all(frame["id"] for frame in capture.frames)


async def probe_role_url(db, database_url: str) -> str:
    """A login role that may read every table but the review events: a stream that issues the
    review read under it fails loudly, so silence proves the read was never made."""
    await db.execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'stream_probe')"
        " THEN CREATE ROLE stream_probe LOGIN; END IF; END $$"
    )
    await db.execute("GRANT USAGE ON SCHEMA public TO stream_probe")
    await db.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO stream_probe")
    await db.execute("REVOKE SELECT ON review_status_events FROM stream_probe")
    # What a read needs to position the stream log when no detector has yet (the bundle's role too).
    await db.execute("GRANT UPDATE (position) ON stream_changes TO stream_probe")
    await db.execute("GRANT USAGE ON SEQUENCE stream_position_seq TO stream_probe")
    return psycopg.conninfo.make_conninfo(database_url, user="stream_probe")


async def test_each_connection_sees_only_what_it_may(db, stream_url: str, mint_token: Callable[..., str]) -> None:
    await alert(db, "a-A", " ORG_A ")  # normalised on both sides
    await alert(db, "a-B", "org_b")
    await alert(db, "a-blank", "  ")
    await review(db, "r-A", "org_a")
    await review(db, "r-B", "ORG_B")
    await review(db, "r-none", None)
    await failed_delivery(db, "d-A", "org_a")
    await failed_delivery(db, "d-B", "org_b")
    tenant_a, tenant_b = owner(mint_token, "org_a", "u_a"), owner(mint_token, "Org_B", "u_b")
    admin = session_headers(mint_token(sub="u_admin", platform_role="super_admin"))
    a, b, root = await asyncio.gather(
        capture_sse(stream_url, tenant_a, 1.0),
        capture_sse(stream_url, tenant_b, 1.0),
        capture_sse(stream_url, admin, 1.0),
    )
    ids = lambda capture, kind: sorted(item["id"] for item in capture.events(kind))  # noqa: E731
    assert (ids(a, "alert.triggered"), ids(a, "review.status.changed"), ids(a, "delivery.failed")) == (
        ["a-A"], ["r-A"], ["d-A"]
    )  # fmt: skip
    assert (ids(b, "alert.triggered"), ids(b, "review.status.changed"), ids(b, "delivery.failed")) == (
        ["a-B"], ["r-B"], ["d-B"]
    )  # fmt: skip
    assert ids(root, "review.status.changed") == ["r-A", "r-B", "r-none"]
    assert ids(root, "alert.triggered") == []  # the platform reviewer has no tenant of its own


async def test_without_review_capability_the_review_table_is_never_queried(
    db, mint_token: Callable[..., str], database_url: str, set_env, capfd: pytest.CaptureFixture[str]
) -> None:
    await alert(db, "a-A", "org_a")
    await review(db, "r-A", "org_a")
    set_env(
        DATABASE_URL=await probe_role_url(db, database_url),
        ERMIS_SSE_POLL_INTERVAL_MS="100",
        ERMIS_SSE_MAX_DURATION_S="5",
    )
    with serve_in_thread(EVENTS) as url:
        member = session_headers(mint_token(sub="u_m", org_id="org_a", org_role="org:member"))
        capture = await capture_sse(f"{url}/api/notifications/events", member, 1.0)
        assert [item["id"] for item in capture.events("alert.triggered")] == ["a-A"]
        assert capture.events("review.status.changed") == []
        assert "permission denied" not in capfd.readouterr().err
        # The control: a reviewer's stream does issue the read, and the probe catches it.
        await capture_sse(f"{url}/api/notifications/events", owner(mint_token), 1.0)
        assert "permission denied for table review_status_events" in capfd.readouterr().err


async def test_a_reconnect_with_last_event_id_gets_only_what_it_missed(
    db, stream_url: str, mint_token: Callable[..., str]
) -> None:
    for index in range(3):
        await alert(db, f"a{index}", "org_a", minutes_ago=10 - index)
    first = await capture_sse(stream_url, owner(mint_token), 0.8)
    last_id = first.frames[-1]["id"]
    assert len(first.events("alert.triggered")) == 3
    await alert(db, "a-missed", "org_a")
    await notification(db, "n-missed", "user_a")
    resumed = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": last_id}, 0.8)
    assert [(item["id"], item["initial"]) for item in resumed.events("alert.triggered")] == [("a-missed", False)]
    assert [item["id"] for item in resumed.events("notification.created")] == ["n-missed"]


async def test_a_reconnect_never_sends_notifications_that_existed_when_the_first_connection_opened(
    db, stream_url: str, mint_token: Callable[..., str]
) -> None:
    await alert(db, "a-old", "org_a", minutes_ago=10)
    await notification(db, "n-seeded", "user_a")  # newer than the replayed alert, never sent
    first = await capture_sse(stream_url, owner(mint_token), 0.8)
    assert [item["id"] for item in first.events("alert.triggered")] == ["a-old"]
    assert first.events("notification.created") == []
    cursor = first.frames[-1]
    assert cursor["event"] == "stream.cursor" and cursor["id"] == first.frames[0]["id"]  # the heads
    resumed = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": cursor["id"]}, 0.8)
    assert resumed.events("notification.created") == [] and resumed.events("alert.triggered") == []
    # A tab taking over a shared stream resumes the same way, by query (it cannot set the header).
    by_query = await capture_sse(f"{stream_url}?lastEventId={quote(cursor['id'])}", owner(mint_token), 0.8)
    assert by_query.events("notification.created") == [] and by_query.events("alert.triggered") == []


async def test_the_rest_polling_flag_answers_204(db, stream_url: str, mint_token: Callable[..., str]) -> None:
    await set_feature_flag("notificationsRestPolling", True, "org_a")
    assert (await capture_sse(stream_url, owner(mint_token), 1.0)).status == 204
    assert (await capture_sse(stream_url, owner(mint_token, "org_b", "u_b"), 1.0, stop_after=0)).status == 200


async def test_payloads_that_could_break_a_frame_do_not(db, stream_url: str, mint_token: Callable[..., str]) -> None:
    await alert(db, "a-lines", "org_a", minutes_ago=3, title="line one\nline two\r\nevent: forged\n\ndata: x")
    await alert(db, "a-huge", "org_a", minutes_ago=2, title="H" * 100_000)
    await review(db, "r-bad", "org_a", action="not-an-action")  # breaks the contract: dropped
    await review(db, "r-good", "org_a", headline="ünïcode \u2028 ✓")
    capture = await capture_sse(stream_url, owner(mint_token), 1.0)
    titles = {item["id"]: item["title"] for item in capture.events("alert.triggered")}
    assert titles["a-lines"].startswith("line one\nline two") and len(titles["a-huge"]) == 100_000
    assert [item["id"] for item in capture.events("review.status.changed")] == ["r-good"]
    events = {frame.get("event") for frame in capture.frames} - {"stream.cursor"}
    assert events <= {"alert.triggered", "review.status.changed"}
    assert all(isinstance(json.loads(frame["data"]), dict) for frame in capture.frames if "data" in frame)


async def test_rest_fallback_has_the_same_items_and_authorization(db, mint_token: Callable[..., str]) -> None:
    await alert(db, "a-A", "org_a")
    await alert(db, "a-B", "org_b")
    await review(db, "r-A", "org_a")
    await notification(db, "n1", "u_m")
    member = session_headers(mint_token(sub="u_m", org_id="org_a", org_role="org:member"))
    async with client_for(load_api_app("api/notifications/index.py")) as client:
        body = (await client.get("/api/notifications", headers=member)).json()
        assert (await client.get("/api/notifications")).status_code == 401
    assert [item["id"] for item in body["alerts"]] == ["a-A"]
    assert body["reviewEvents"] == []
    assert body["unreadCount"] == 1 and [item["id"] for item in body["notifications"]] == ["n1"]


async def test_rows_committed_with_no_stream_open_are_in_the_snapshot_and_a_stream_resumes_after_it(
    db, stream_url: str, mint_token: Callable[..., str]
) -> None:
    """No stream is open, so no detector: the snapshot positions what committed before it and
    returns it with its cursor; a stream opened later from that cursor gets exactly the rows
    committed after the snapshot."""
    await alert(db, "quiet-1", "org_a")
    await alert(db, "quiet-2", "org_a")
    assert await (await db.execute("SELECT count(*) FROM stream_changes WHERE position IS NULL")).fetchone() == (2,)
    async with client_for(load_api_app("api/notifications/index.py")) as client:
        body = (await client.get("/api/notifications", headers=owner(mint_token))).json()
    assert [item["id"] for item in body["alerts"]] == ["quiet-2", "quiet-1"]
    await alert(db, "after-snapshot", "org_a")
    resumed = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": body["cursor"]}, 2.0)
    assert [item["id"] for item in resumed.events("alert.triggered")] == ["after-snapshot"]
    assert resumed.events("stream.reset") == []


async def test_a_member_sees_a_failed_webhook_by_scheme_and_host_only(
    db, set_env, stream_url: str, mint_token: Callable[..., str]
) -> None:
    """A Slack-style webhook URL is a credential: a member's stream and snapshot carry the
    endpoint as ``scheme://host/…``, for a delivery made now and for a row logged in full before."""
    secret = "https://hooks.example.com:8443/services/T000/B000/XXXXSECRET?token=abc"
    set_env(ERMIS_WEBHOOK_TIMEOUT_S="0.5")
    rule = AlertRule(id="hook", keywords=["frog"], channel="webhook", endpoint=secret)
    await evaluate_alert_rules("org_a", [{"id": "s", "headline": "Frog"}], [rule])  # refused: no such host here
    await db.execute(
        "INSERT INTO delivery_logs (id, delivery_id, tenant_scope_id, method, response_code, endpoint, status)"
        " VALUES ('d-legacy', 'd', 'org_a', 'webhook', 500, %s, 'failed')",
        (secret,),
    )
    member = session_headers(mint_token(sub="u_m", org_id="org_a", org_role="org:member"))
    capture = await capture_sse(stream_url, member, 1.0)
    async with client_for(load_api_app("api/notifications/index.py")) as client:
        snapshot = (await client.get("/api/notifications", headers=member)).json()
    shown = [item["endpoint"] for item in capture.events("delivery.failed")]
    shown += [item["endpoint"] for item in snapshot["deliveryFailures"]]
    assert shown == ["https://hooks.example.com:8443/…"] * 4
    everything = json.dumps(capture.frames) + json.dumps(snapshot)
    assert "XXXXSECRET" not in everything and "token=abc" not in everything and "/services" not in everything


async def test_a_tick_without_the_database_is_skipped_and_the_stream_goes_on(
    db, stream_url: str, mint_token: Callable[..., str], set_env, capfd: pytest.CaptureFixture[str]
) -> None:
    # Polling (no bus): every read is the stream's own, in Postgres. (Pushed, a change's rows come
    # told by the detector, which reconnects by itself: the stream would never meet the outage.)
    set_env(**LISTENERS["polled"])

    async def outage_then_event() -> None:
        await asyncio.sleep(0.6)
        # Every connection the stream's pool holds is cut, as in a database restart.
        await db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        await asyncio.sleep(0.5)
        await alert(db, "after-outage", "org_a")

    writer = asyncio.create_task(outage_then_event())
    capture = await capture_sse(stream_url, owner(mint_token), seconds=3.0)
    await writer
    assert capture.status == 200
    assert [item["id"] for item in capture.events("alert.triggered")] == ["after-outage"]
    assert not capture.closed_by_server
    assert '"context": "/api/notifications/events"' in capfd.readouterr().err  # the failed tick was reported


@pytest.mark.parametrize(
    ("last_event_id", "reason"),
    [
        ("garbage", "malformed"),
        ("2026-12-04T10:00:00.000000+00:00|alert.triggered|a1", "upgraded"),
        ("000000000000.00000000.1.0.1.1", "foreign"),
    ],
)
async def test_a_cursor_that_cannot_be_trusted_gets_one_reset_then_new_rows(
    db, stream_url: str, mint_token: Callable[..., str], last_event_id: str, reason: str
) -> None:
    await alert(db, "a-old", "org_a")

    async def later() -> None:
        await asyncio.sleep(0.6)
        await alert(db, "a-new", "org_a")

    writer = asyncio.create_task(later())
    capture = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": last_event_id}, 1.5)
    await writer
    assert capture.status == 200
    assert capture.events("stream.reset") == [{"reason": reason}] and capture.frames[0]["event"] == "stream.reset"
    assert [(item["id"], item["initial"]) for item in capture.events("alert.triggered")] == [("a-new", False)]


async def test_a_cursor_from_another_audience_or_past_retention_is_reset(
    db, stream_url: str, mint_token: Callable[..., str]
) -> None:
    # Until the frames come, not for a fixed window: an opening read slower than the window (a
    # loaded CI host) left the first capture empty.
    first = await capture_sse(stream_url, owner(mint_token), 10.0, stop_after=1)
    cursor = first.frames[-1]["id"]
    other = await capture_sse(stream_url, {**owner(mint_token, "org_b"), "Last-Event-ID": cursor}, 0.6)
    assert other.events("stream.reset") == [{"reason": "audience_changed"}]
    await alert(db, "a-pruned", "org_a")
    await db.execute("UPDATE stream_changes SET logged_at = now() - interval '8 days'")
    await cleanup_platform_state()
    expired = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": cursor}, 0.6)
    assert expired.events("stream.reset") == [{"reason": "expired"}] and expired.events("alert.triggered") == []


async def test_a_resume_passes_a_row_deleted_since_it_committed(
    db, stream_url: str, mint_token: Callable[..., str], capfd: pytest.CaptureFixture[str]
) -> None:
    # Until the frames come, not for a fixed window: an opening read slower than the window (a
    # loaded CI host) left the first capture empty.
    first = await capture_sse(stream_url, owner(mint_token), 10.0, stop_after=1)
    cursor = first.frames[-1]["id"]
    for alert_id in ("a1", "a2", "a3"):
        await alert(db, alert_id, "org_a")
    await db.execute("DELETE FROM alert_history WHERE id IN ('a1', 'a3')")  # an erasure, say
    resumed = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": cursor}, 10.0, stop_after=2)
    assert [item["id"] for item in resumed.events("alert.triggered")] == ["a2"]
    final = resumed.frames[-1]
    assert final["event"] == "stream.cursor" and final["id"] != resumed.frames[0]["id"]  # past a3 as well
    again = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": final["id"]}, 0.6)
    assert again.events("alert.triggered") == [] and again.events("stream.reset") == []
    assert "Traceback" not in capfd.readouterr().err


# A writer: how many alerts it inserts, how long it waits before inserting and before committing,
# and whether it rolls back instead.
racing_writer = st.tuples(st.integers(1, 3), st.floats(0, 0.3), st.floats(0, 0.3), st.booleans())
LISTENERS = {"pushed": {}, "polled": {"REDIS_URL": "redis://127.0.0.1:9/0"}}  # polled: no bus, no detector
race_examples = itertools.count()


@pytest.mark.parametrize("listener", LISTENERS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writers=st.lists(racing_writer, min_size=8, max_size=10),
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=6),
)
async def test_racing_writers_and_a_client_reconnecting_anywhere_lose_and_double_nothing(
    db, database_url: str, set_env, mint_token: Callable[..., str], listener: str, writers: list, cuts: list[int]
) -> None:
    """Writers overlap and commit in any order while the client drops its connection after a
    drawn number of frames (mid-chunk, as a network change would) and resumes from the last id
    it got, alternately on two stream servers (two event loops: two listeners, two candidates
    for the detector's lease): over all its connections each committed alert arrives exactly
    once. Pushed through the bus, and with Redis unreachable (the poll alone)."""
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="100", ERMIS_SSE_MAX_DURATION_S="30", **LISTENERS[listener])
    tenant = f"org_race_{listener}_{next(race_examples)}"
    headers = owner(mint_token, tenant, f"user_{tenant}")
    committed: set[str] = set()
    delivered: list[str] = []

    async def write(index: int, rows: int, before_insert: float, before_commit: float, rollback: bool) -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await asyncio.sleep(before_insert)
            ids = [f"{tenant}-w{index}-{row}" for row in range(rows)]
            await conn.execute(
                "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
                " SELECT id, %s, 'r', id, 'info', 'in-app' FROM unnest(%s::text[]) AS id",
                (tenant, ids),
            )
            await asyncio.sleep(before_commit)
            if rollback and index % 3 == 0:
                await conn.rollback()
            else:
                await conn.commit()
                committed.update(ids)

    with serve_in_thread(EVENTS) as url_a, serve_in_thread(EVENTS) as url_b:
        servers = itertools.cycle([f"{url_a}/api/notifications/events", f"{url_b}/api/notifications/events"])
        first = await capture_sse(next(servers), headers, 5.0, stop_after=1)  # the heads, before any write
        last_id = first.frames[0]["id"]
        writing = asyncio.gather(*(write(index, *plan) for index, plan in enumerate(writers)))
        deadline = time.monotonic() + 30
        for cut, stream_url in zip(itertools.cycle(cuts), servers):
            assert time.monotonic() < deadline, sorted(committed - set(delivered))
            finished = writing.done()  # before the connection: one opened after it can see all
            connection = await capture_sse(stream_url, {**headers, "Last-Event-ID": last_id}, 1.0, stop_after=cut)
            assert connection.status == 200 and connection.events("stream.reset") == []
            delivered += [item["id"] for item in connection.events("alert.triggered")]
            last_id = next((frame["id"] for frame in reversed(connection.frames) if frame.get("id")), last_id)
            if finished and set(delivered) >= committed:
                break
        await writing
    assert sorted(delivered) == sorted(committed)


async def test_with_advances_lost_the_safety_net_delivers_every_row_once(
    db, stream_url: str, mint_token: Callable[..., str], set_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bus is up but no advance is heard (every message the detector publishes lost, as a
    message to a subscriber reconnecting at that instant would be): the safety-net reads, by
    position, still deliver each alert once."""
    set_env(ERMIS_SSE_SAFETY_POLL_S="1", ERMIS_SSE_POLL_INTERVAL_MS="20000")

    async def lost(*_args: object) -> None:
        return None

    monkeypatch.setattr(RedisBus, "publish_advanced", lost)

    async def write() -> None:
        await asyncio.sleep(0.5)
        for batch in range(5):
            async with db.transaction():
                for row in range(3):
                    await alert(db, f"quiet-{batch}-{row}", "org_a")
            await asyncio.sleep(0.3)

    capture, _ = await asyncio.gather(capture_sse(stream_url, owner(mint_token), 4.5), write())
    delivered = [item["id"] for item in capture.events("alert.triggered")]
    assert sorted(delivered) == sorted(f"quiet-{batch}-{row}" for batch in range(5) for row in range(3))


HELD_OPEN_S = 60
HELD_WRITES = 20


async def test_transactions_held_open_hold_no_stream_back(
    db, database_url: str, stream_url: str, mint_token: Callable[..., str], set_env
) -> None:
    """One transaction holds a write to another table open for a minute (a refresh tick, a
    cleanup batch), another an uncommitted alert of the same tenant: the alerts committed
    meanwhile, spread over the minute, each reach the stream at once (a cluster-wide snapshot
    watermark would hold them all until both end), and the held alert arrives when it commits."""
    set_env(ERMIS_SSE_MAX_DURATION_S=str(HELD_OPEN_S + 30))
    async with (
        await psycopg.AsyncConnection.connect(database_url) as unrelated,
        await psycopg.AsyncConnection.connect(database_url) as same_channel,
    ):
        await unrelated.execute(
            "INSERT INTO feature_flag_values (flag_key, tenant_scope_id, enabled) VALUES ('x', 'o', true)"
        )
        await same_channel.execute(
            "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
            " VALUES ('a-held', 'org_a', 'r', 'a-held', 'info', 'in-app')"
        )
        arrivals: dict[str, float] = {}
        written: dict[str, float] = {}
        alert_ids = [f"a-{n:02}" for n in range(HELD_WRITES)]

        async def write() -> None:
            await asyncio.sleep(0.5)
            for alert_id in alert_ids:
                written[alert_id] = time.monotonic()
                await alert(db, alert_id, "org_a")
                await asyncio.sleep(HELD_OPEN_S / HELD_WRITES)
            await same_channel.commit()
            written["a-held"] = time.monotonic()

        async def read() -> SseCapture:
            capture = SseCapture()
            task = asyncio.create_task(
                capture_sse(stream_url, owner(mint_token), HELD_OPEN_S + 10, stop_after=HELD_WRITES + 3, into=capture)
            )
            while not task.done():
                for item in capture.events("alert.triggered"):
                    arrivals.setdefault(item["id"], time.monotonic())
                await asyncio.sleep(0.01)
            return await task

        capture, _ = await asyncio.gather(read(), write())
        assert unrelated.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # open throughout
        await unrelated.rollback()
    assert [item["id"] for item in capture.events("alert.triggered")] == [*alert_ids, "a-held"]
    latencies = {alert_id: arrivals[alert_id] - written[alert_id] for alert_id in alert_ids}
    assert max(latencies.values()) < 0.25, latencies


async def send_burst(db, frames: AsyncIterator[bytes], first: int, count: int) -> tuple[int, int]:
    """Insert ``count`` alerts in one statement and read the stream until all went out, checking
    each as it comes (once, in order, increasing positions) and holding nothing per row, so the
    traced peak is the stream's: (that peak, the largest chunk in frames)."""
    await db.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
        " SELECT 'burst-' || lpad(n::text, 6, '0'), 'org_burst', 'r', n::text, 'info', 'in-app'"
        " FROM generate_series(%s::int, %s::int) AS n",
        (first, first + count - 1),
    )
    expected, last_position, largest_chunk, frame_count = first, 0, 0, 0
    tracemalloc.start()
    try:
        while expected < first + count:
            chunk = await asyncio.wait_for(anext(frames), timeout=10)
            chunk_frames = chunk.decode().split("\r\n\r\n")[:-1]
            largest_chunk, frame_count = max(largest_chunk, len(chunk_frames)), frame_count + len(chunk_frames)
            for frame in chunk_frames:
                fields = dict(line.split(": ", 1) for line in frame.splitlines() if not line.startswith(":"))
                if fields.get("event") == "alert.triggered":
                    assert json.loads(fields["data"])["id"] == f"burst-{expected:06}"
                    expected += 1
                    alerts_position = int(fields["id"].split(".")[2])  # <epoch>.<audience>.<alerts>...
                    assert alerts_position > last_position
                    last_position = alerts_position
        return tracemalloc.get_traced_memory()[1], largest_chunk
    finally:
        tracemalloc.stop()


async def test_ten_thousand_alerts_of_one_statement_go_out_whole_in_bounded_pages(db, set_env) -> None:
    """The stream in-process: after one INSERT of 10,000 alerts every one goes out once, in
    position order, in chunks of at most a page; the stream's memory meanwhile is what a burst of
    1,000 costs — a few pages, not the burst."""
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="200", ERMIS_SSE_MAX_DURATION_S="60")
    frames = notification_frames(Audience("user_burst", "org_burst", None), None)
    try:
        await anext(frames)  # connected: the cursor is the heads
        small_peak, _ = await send_burst(db, frames, 1, 1_000)
        peak, largest_chunk = await send_burst(db, frames, 1_001, 10_000)
    finally:
        await frames.aclose()
    assert largest_chunk <= PAGE_SIZE + 1  # a page of frames and its cursor frame
    assert peak < 1.5 * small_peak, (peak, small_peak)


RACE_SECONDS = 40


async def test_a_standard_eventsource_cut_at_random_while_eight_writers_race_loses_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    """40 s against scripts/dev: npm's `eventsource` (not our client) has its connection cut
    after a random number of bytes — mid-frame as often as not — and reconnects by itself with
    its Last-Event-ID, while streams self-close every few seconds and eight writers insert alerts
    and notifications, holding each transaction open a random while and sometimes rolling back.
    Every committed row arrives exactly once, none as a replay, and the stream never resets."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    committed: set[str] = set()
    with running_dev_server(tmp_path / "race-dev", ERMIS_SSE_MAX_DURATION_S="7") as server:
        token = dev_token(server, "--sub", "user_race", "--org-id", "org_race", "--org-role", "org:member")
        with eventsource_client(f"{server.url}/api/notifications/events", token) as run:
            assert await eventually(lambda: asyncio.sleep(0, result=bool(run.lines)), timeout_s=15), (
                "the client never connected"
            )
            await asyncio.sleep(0.5)  # its first connection is open: what follows is news
            until = time.monotonic() + RACE_SECONDS
            await asyncio.gather(
                *(
                    race_alerts_and_notifications(
                        server.database_url, rng, until, committed, "org_race", "user_race", writer
                    )
                    for writer in range(8)
                )
            )
            await eventually(lambda: asyncio.sleep(0, result=set(run.delivered()) >= committed), timeout_s=60)
    connections = run.connections()
    assert [line for line in run.events() if line["event"] == "stream.reset" or line["initial"]] == [], seed
    assert sorted(run.delivered()) == sorted(committed), (seed, len(committed), len(connections))
    assert len(connections) >= 10, connections  # cut and resumed often, not one long connection


async def first_frames(audience: Audience, last_event_id: str | None, seconds: float = 1.5) -> list[str]:
    """The alert ids a new connection's frames carry in its first ``seconds``, and the last id."""
    frames = notification_frames(audience, last_event_id)
    texts: list[str] = []

    async def collect() -> None:
        async for frame in frames:
            texts.append(frame.decode())

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(collect(), seconds)
    await frames.aclose()
    return texts


def events_of(texts: list[str]) -> list[dict[str, str]]:
    """Each SSE event the bytes carry, as its fields (several may come in one write)."""
    blocks = "".join(texts).replace("\r\n", "\n").split("\n\n")
    return [dict(line.split(": ", 1) for line in block.splitlines() if ": " in line) for block in blocks if block]


def alert_ids(texts: list[str]) -> list[str]:
    return [json.loads(e["data"])["id"] for e in events_of(texts) if e.get("event") == "alert.triggered"]


def last_id(texts: list[str]) -> str:
    return [event["id"] for event in events_of(texts) if "id" in event][-1]


async def test_a_connect_and_a_resume_after_a_gap_nobody_heard_start_current(db, redis) -> None:
    """The user's last stream closes; alerts commit while no stream of this process follows the
    tenant; a connect within the sharing window replays them, and a resume from the first
    connection's last id gets them: no read shared from before the gap answers either."""
    await healthy_listener()
    audience = Audience("user_gap", "org_gap", None)
    await alert(db, "g1", "org_gap")
    first = await first_frames(audience, None)
    assert alert_ids(first) == ["g1"]
    await alert(db, "g2", "org_gap")
    assert alert_ids(await first_frames(audience, None)) == ["g1", "g2"]  # a connect: the replay
    await alert(db, "g3", "org_gap")
    assert alert_ids(await first_frames(audience, last_id(first))) == ["g2", "g3"]  # a resume
