"""Streams that end with their session (``lib.streams.sse``, ``Session.verifies_for_s``): a
stream lives no longer than the token that opened it. On each stream route, a stream opened
with a token about to expire ends within the leeway after its ``exp`` with ``stream.end``
``{"reason": "token_expired"}`` — long before its self-close; a user whose next token says they
left the tenant is refused the tenant's stream and gets none of its events; and a self-close
above the platform's limit is refused when the server starts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pytest

from lib.auth.sessions import LEEWAY_SECONDS
from lib.local.paths import PROJECT_ROOT
from lib.settings import MAX_STREAM_DURATION_S, Settings, SettingsError
from tests.security.conftest import ROUTER
from tests.support.auth import session_headers
from tests.support.security import record
from tests.support.servers import serve_in_thread
from tests.support.sse import capture_sse

pytestmark = pytest.mark.security

TTL_S = 2  # the token's life: the stream must end by TTL_S + LEEWAY_SECONDS (and a second of slack)
ROUTES = ("/api/notifications/events", "/api/feed/events", "/api/stories/s-exp/events")


@pytest.fixture
async def streams_url(db, set_env):
    set_env(ERMIS_SSE_MAX_DURATION_S="60", ERMIS_SSE_POLL_INTERVAL_MS="20000")
    await db.execute(
        "INSERT INTO editorial_story_drafts (id, tenant_scope_id, story_id, headline, status, phase)"
        " VALUES ('org_exp:s-exp', 'org_exp', 's-exp', 'Expiring', 'review', 'synthesized')"
    )
    with serve_in_thread(ROUTER) as url:
        yield url


@pytest.mark.parametrize("route", ROUTES)
async def test_a_stream_ends_with_its_token(streams_url: str, route: str, mint_token: Callable[..., str]) -> None:
    token = mint_token(org_id="org_exp", org_role="org:member", ttl_seconds=TTL_S)
    opened = time.monotonic()
    capture = await capture_sse(f"{streams_url}{route}", session_headers(token), 30)
    lasted = time.monotonic() - opened
    ends = capture.events("stream.end")
    ended_right = capture.status == 200 and capture.closed_by_server and ends == [{"reason": "token_expired"}]
    in_time = TTL_S - 1 <= lasted <= TTL_S + LEEWAY_SECONDS + 1.5
    record("streams", "a stream past its session token's exp", tried=1, bad=int(not (ended_right and in_time)))
    assert ended_right, capture.frames[-3:]
    assert in_time, lasted
    assert capture.frames[-1]["event"] == "stream.end" and "id" not in capture.frames[-1]  # the last id stays


async def test_who_left_the_tenant_gets_nothing_of_it_after_their_token(
    db, streams_url: str, mint_token: Callable[..., str]
) -> None:
    """Removed from the tenant: the stream opened before ends with the token that still said they
    belonged; the next token (without the tenant) is refused the tenant's feed, and its
    notification stream carries none of the tenant's alerts."""
    member = mint_token(sub="user_leaving", org_id="org_exp", org_role="org:member", ttl_seconds=TTL_S)
    before = await capture_sse(f"{streams_url}/api/notifications/events", session_headers(member), 30)
    assert before.events("stream.end") == [{"reason": "token_expired"}]

    after = mint_token(sub="user_leaving", ttl_seconds=600)
    async with httpx.AsyncClient(timeout=10) as client:
        feed = await client.get(f"{streams_url}/api/feed/events", headers=session_headers(after))
        story = await client.get(f"{streams_url}/api/stories/s-exp/events", headers=session_headers(after))
    reading = asyncio.create_task(capture_sse(f"{streams_url}/api/notifications/events", session_headers(after), 3))
    await asyncio.sleep(1)
    await db.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
        " VALUES ('alert-after-leaving', 'org_exp', 'r', 's-exp', 'For members only', 'critical', 'in-app')"
    )
    capture = await reading
    leaked = [frame for frame in capture.frames if "For members only" in frame.get("data", "")]
    refused = feed.status_code == 204 and story.status_code in (403, 404)
    record("streams", "a stream reopened by who left the tenant", tried=3, bad=len(leaked) + (not refused) * 2)
    assert refused, (feed.status_code, story.status_code)
    assert capture.status == 200 and not leaked


@pytest.mark.parametrize("value", [str(MAX_STREAM_DURATION_S + 1), "3600", "0", "-5", "soon"])
def test_a_self_close_past_the_platform_limit_is_refused_at_start(value: str, database_url: str) -> None:
    with pytest.raises(SettingsError, match="ERMIS_SSE_MAX_DURATION_S must be a number above 0 and at most 290"):
        Settings({"ERMIS_SSE_MAX_DURATION_S": value})
    assert Settings({"ERMIS_SSE_MAX_DURATION_S": str(MAX_STREAM_DURATION_S)}).ermis_sse_max_duration_s == 290
    if value == "3600":  # the process that serves the streams says so and does not start
        serve = subprocess.run(
            [sys.executable, "-m", "lib.local.serve", "--port", "9"],
            cwd=PROJECT_ROOT,
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": str(PROJECT_ROOT),
                "DATABASE_URL": database_url,
                "CLERK_JWT_KEY": "k",
                "ERMIS_SSE_MAX_DURATION_S": value,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert serve.returncode == 1
        assert "ERMIS_SSE_MAX_DURATION_S must be a number above 0 and at most 290" in serve.stderr
        assert "Traceback" not in serve.stderr
