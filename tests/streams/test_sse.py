"""lib.streams.sse and lib.contracts.stream_events: frames data cannot break, contracts that
answer None instead of raising, and the response: ends cleanly when the server stops, notices a
client that goes, answers HEAD with headers only, and keeps an idle connection alive."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sse_starlette import ServerSentEvent

from lib.contracts.stream_events import AlertTriggered, FeedChanged, parse_json_with_schema
from lib.streams import watch
from lib.streams.sse import open_streams, sse_frame
from tests.support.auth import session_headers
from tests.support.functions import load_api_app
from tests.support.servers import serve_in_thread
from tests.support.waiting import eventually


@pytest.mark.parametrize("name", ["", "Alert", "alert triggered", "alert\ntriggered", "x" * 65, "1up"])
def test_invalid_event_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        sse_frame(name, {}, "1")


@given(st.text(max_size=200), st.text(max_size=40))
def test_any_text_makes_one_well_formed_frame_or_none(text: str, event_id: str) -> None:
    frame = sse_frame("feed.changed", {"value": text}, event_id)
    if frame is None:
        return  # text that UTF-8 cannot carry (a lone surrogate) is dropped
    encoded = frame.decode()
    lines = encoded.split("\r\n")
    assert lines[-2:] == ["", ""]  # exactly one frame, terminated once
    fields = dict(line.split(": ", 1) for line in lines[:-2])
    assert set(fields) == {"id", "event", "data"}
    assert json.loads(fields["data"]) == {"value": text}
    assert "\n" not in fields["id"] and "\r" not in fields["id"] and "\x00" not in fields["id"]


@given(
    st.text(max_size=40).filter(lambda text: "\x00" not in text),
    st.text(max_size=100),
    st.none() | st.integers(0, 10**6),
)
def test_a_frame_with_its_id_is_what_sse_starlette_writes(event_id: str, text: str, retry: int | None) -> None:
    """``with_id`` writes the id line itself on the hot path: byte for byte sse-starlette's frame
    (its fields in our order: id and retry first), whatever the id holds."""
    frame = sse_frame("feed.changed", {"value": text}, event_id, retry)
    if frame is None:
        return
    data = json.dumps({"value": text}, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    theirs = ServerSentEvent(data=data, event="feed.changed", id=event_id).encode()
    if retry is None:
        assert frame == theirs
    else:
        head = ServerSentEvent(id=event_id, retry=retry).encode()[:-2]
        assert frame == head + theirs[len(ServerSentEvent(id=event_id).encode()) - 2 :]


def test_parse_json_with_schema_never_raises() -> None:
    assert parse_json_with_schema('{"latestUpdatedAt": null, "draftCount": 2}', FeedChanged) == FeedChanged(
        latestUpdatedAt=None, draftCount=2
    )
    for bad in (None, "", "{", "[]", '{"draftCount": "two"}', '{"latestUpdatedAt": null, "draftCount": 1, "x": 1}'):
        assert parse_json_with_schema(bad, FeedChanged) is None
    alert = {
        "id": "a", "ruleId": None, "storyId": "s", "title": "t", "severity": "severe",
        "channel": "in-app", "deliveredAt": "2026-01-01T00:00:00.000Z", "initial": False,
    }  # fmt: skip
    assert parse_json_with_schema(json.dumps(alert), AlertTriggered) is None
    assert parse_json_with_schema(json.dumps({**alert, "severity": "critical"}), AlertTriggered) is not None


async def test_nul_and_invalid_utf8_cannot_reach_a_frame(db) -> None:
    # Postgres refuses both at write time, so no stored row can carry them to a stream...
    for title in ("nul \x00 inside", "bad \udcff utf-8"):
        with pytest.raises((psycopg.DataError, UnicodeEncodeError)):
            await db.execute(
                "INSERT INTO notifications (id, user_id, title, type) VALUES ('n', 'u', %s, 'system')", (title,)
            )
    # ...and if one ever did, the frame escapes the NUL and drops what UTF-8 cannot carry.
    frame = sse_frame("notification.created", {"title": "a\x00b"}, "id\x00with-nul")
    encoded = frame.decode()
    assert "\\u0000" in encoded and "\x00" not in encoded
    assert sse_frame("notification.created", {"title": "bad \udcff"}, "x") is None


@pytest.fixture
def feed_app(set_env):
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="20000", ERMIS_SSE_MAX_DURATION_S="60")
    return load_api_app("api/feed/events.py")


async def test_a_stopping_server_ends_its_open_streams_cleanly(
    db, feed_app, mint_token: Callable[..., str], capfd: pytest.CaptureFixture[str]
) -> None:
    headers = session_headers(mint_token(org_id="org_stop", org_role="org:member"))
    server = serve_in_thread(feed_app)
    url = server.__enter__()
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as client:
        async with client.stream("GET", f"{url}/api/feed/events", headers=headers) as response:
            assert response.status_code == 200
            stopping = asyncio.create_task(asyncio.to_thread(server.__exit__, None, None, None))
            started = time.monotonic()
            body = b"".join([chunk async for chunk in response.aiter_raw()])  # a clean end, not a reset
            assert time.monotonic() - started < 3  # not the stream's 60 s self-close
            await stopping
    assert body == b"" or body.endswith(b"\r\n\r\n")
    assert "Exception in ASGI application" not in capfd.readouterr().err


async def test_a_client_that_goes_is_noticed_at_once_and_head_gets_headers_only(
    db, feed_app, mint_token: Callable[..., str]
) -> None:
    headers = session_headers(mint_token(org_id="org_gone", org_role="org:member"))
    before = open_streams["feed"]
    with serve_in_thread(feed_app) as url:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as client:
            head = await client.head(f"{url}/api/feed/events", headers=headers)
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-type"] == "text/event-stream; charset=utf-8"
            async with client.stream("GET", f"{url}/api/feed/events", headers=headers):
                assert await eventually(lambda: asyncio.sleep(0, result=open_streams["feed"] == before + 1))
            # The response is closed: the server sees the disconnect while the stream waits.
            assert await eventually(lambda: asyncio.sleep(0, result=open_streams["feed"] == before), timeout_s=2)


async def test_an_idle_stream_sends_keep_alive_comments(
    db, feed_app, mint_token: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "PING_SECONDS", 0.3)
    headers = session_headers(mint_token(org_id="org_idle", org_role="org:member"))
    with serve_in_thread(feed_app) as url:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as client:
            async with client.stream("GET", f"{url}/api/feed/events", headers=headers) as response:
                lines = []
                async for line in response.aiter_lines():
                    lines.append(line)
                    if lines.count(": ping") == 2:
                        break
    assert lines.count(": ping") == 2  # nothing changed, and the connection was never silent
