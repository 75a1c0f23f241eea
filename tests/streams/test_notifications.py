"""The notification stream over a real socket: replay, per-event authorization across tenants,
the review read never issued without the capability, Last-Event-ID resume, the REST-polling
flag, payloads that could break a frame, and the REST fallback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from urllib.parse import quote

import psycopg
import pytest

from lib.jobs.state_cleanup import cleanup_platform_state
from lib.platform.flags import set_feature_flag
from tests.support.auth import session_headers
from tests.support.functions import client_for, load_api_app
from tests.support.servers import serve_in_thread
from tests.support.sse import capture_sse

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


async def test_a_tick_without_the_database_is_skipped_and_the_stream_goes_on(
    db, stream_url: str, mint_token: Callable[..., str], database_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
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
    first = await capture_sse(stream_url, owner(mint_token), 0.6)
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
    first = await capture_sse(stream_url, owner(mint_token), 0.6)
    cursor = first.frames[-1]["id"]
    for alert_id in ("a1", "a2", "a3"):
        await alert(db, alert_id, "org_a")
    await db.execute("DELETE FROM alert_history WHERE id IN ('a1', 'a3')")  # an erasure, say
    resumed = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": cursor}, 0.6)
    assert [item["id"] for item in resumed.events("alert.triggered")] == ["a2"]
    final = resumed.frames[-1]
    assert final["event"] == "stream.cursor" and final["id"] != resumed.frames[0]["id"]  # past a3 as well
    again = await capture_sse(stream_url, {**owner(mint_token), "Last-Event-ID": final["id"]}, 0.6)
    assert again.events("alert.triggered") == [] and again.events("stream.reset") == []
    assert "Traceback" not in capfd.readouterr().err
