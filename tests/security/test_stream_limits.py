"""Caps on the streams one user and one tenant hold open (``lib.streams.limits``), over real
sockets: past the cap a stream is a 429 ``too_many_streams`` with ``Retry-After`` (its HEAD
says the same), closing a stream frees its slot, the cap holds across instances through Redis —
Upstash's REST client and plain Redis alike — and an instance killed with streams open frees
their slots within the lease time. Without Redis the process's own count still holds."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from lib.auth.sessions import Session
from lib.local.paths import PROJECT_ROOT
from lib.local.services import free_port
from lib.redis.client import close_redis
from lib.settings import get_settings
from lib.streams.limits import SLOTS_OUTAGE, claim_stream_slot
from tests.security.conftest import ROUTER
from tests.support.security import record
from tests.support.servers import serve_in_thread
from tests.support.sse import SseCapture, capture_sse

pytestmark = pytest.mark.security

STREAM = "/api/notifications/events"


class OpenStreams:
    """Streams held open in the background, each until it is closed."""

    def __init__(self) -> None:
        self.tasks: list[tuple[asyncio.Task[SseCapture], SseCapture]] = []

    async def open(self, url: str, token: str) -> SseCapture:
        capture = SseCapture()
        task = asyncio.create_task(capture_sse(url, {"authorization": f"Bearer {token}"}, 60, into=capture))
        self.tasks.append((task, capture))
        deadline = time.monotonic() + 10
        while capture.status == 0 and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return capture

    async def close_one(self) -> None:
        task, _ = self.tasks.pop(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def close_all(self) -> None:
        while self.tasks:
            await self.close_one()


async def refused(url: str, token: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.get(url, headers={"authorization": f"Bearer {token}"})


def assert_429(response: httpx.Response, lease_s: int) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["retry-after"] == str(lease_s)
    assert response.json()["error"]["code"] == "too_many_streams"


async def eventually_open(url: str, token: str, seconds: float) -> tuple[SseCapture | None, float, OpenStreams]:
    streams, started = OpenStreams(), time.monotonic()
    while time.monotonic() - started < seconds:
        capture = await streams.open(url, token)
        if capture.status == 200:
            return capture, time.monotonic() - started, streams
        await streams.close_all()
        await asyncio.sleep(0.2)
    return None, time.monotonic() - started, streams


async def test_a_user_past_the_cap_is_told_to_retry_and_a_closed_stream_frees_a_slot(
    db, redis_flavour: str, set_env, mint_token
) -> None:
    set_env(ERMIS_STREAMS_PER_USER="3", ERMIS_STREAM_LEASE_S="30")
    token = mint_token(sub="user_capped", org_id="org_capped", org_role="org:member")
    streams = OpenStreams()
    with serve_in_thread(ROUTER) as url:
        opened = [(await streams.open(url + STREAM, token)).status for _ in range(3)]
        over = await refused(url + STREAM, token)
        async with httpx.AsyncClient(timeout=10) as client:
            head = await client.head(url + STREAM, headers={"authorization": f"Bearer {token}"})
            other_route = await client.get(url + "/api/feed/events", headers={"authorization": f"Bearer {token}"})
        await streams.close_one()
        again, took, more = await eventually_open(url + STREAM, token, 5)
        await streams.close_all()
        await more.close_all()
    not_refused = [response.status_code != 429 for response in (over, head, other_route)]
    record("streams", f"a user opening a 4th stream past a cap of 3 ({redis_flavour})", tried=3, bad=sum(not_refused))
    assert opened == [200, 200, 200]
    assert_429(over, 30)
    assert head.status_code == 429 and head.headers["retry-after"] == "30"
    assert other_route.status_code == 429  # the cap counts every stream of the user
    assert again is not None and again.status == 200 and took < 2


async def test_a_tenant_past_its_cap_refuses_its_next_user(db, redis, set_env, mint_token) -> None:
    set_env(ERMIS_STREAMS_PER_TENANT="2", ERMIS_STREAM_LEASE_S="30")
    tokens = [mint_token(sub=f"user_{n}", org_id="org_busy", org_role="org:member") for n in range(3)]
    streams = OpenStreams()
    with serve_in_thread(ROUTER) as url:
        opened = [(await streams.open(url + STREAM, token)).status for token in tokens[:2]]
        over = await refused(url + STREAM, tokens[2])
        elsewhere = await streams.open(url + STREAM, mint_token(sub="user_3", org_id="org_calm", org_role="org:member"))
        await streams.close_all()
    record("streams", "a tenant's 3rd user past a tenant cap of 2", tried=1, bad=int(over.status_code != 429))
    assert opened == [200, 200]
    assert_429(over, 30)
    assert elsewhere.status == 200  # another tenant is not held back


async def test_without_redis_the_process_count_still_caps(db, set_env, mint_token) -> None:
    set_env(REDIS_URL=None, ERMIS_STREAMS_PER_USER="2")
    token = mint_token(sub="user_local")
    streams = OpenStreams()
    with serve_in_thread(ROUTER) as url:
        opened = [(await streams.open(url + STREAM, token)).status for _ in range(2)]
        over = await refused(url + STREAM, token)
        await streams.close_one()
        again = await streams.open(url + STREAM, token)
        await streams.close_all()
    record("streams", "past the cap with no Redis (the process's count)", tried=1, bad=int(over.status_code != 429))
    assert opened == [200, 200] and over.status_code == 429 and again.status == 200


@contextmanager
def other_instance(**env: str) -> Iterator[str]:
    """``scripts/serve`` in its own process: another function instance."""
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "lib.local.serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/api/feature-flags", timeout=1)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline or child.poll() is not None:
                child.kill()
                raise RuntimeError("scripts/serve did not start") from None
            time.sleep(0.1)
    try:
        yield url
    finally:
        child.kill()
        child.wait(timeout=30)


async def test_the_cap_holds_across_instances_and_a_killed_instance_frees_its_slots_within_the_lease(
    db, redis, set_env, mint_token
) -> None:
    lease_s = 2
    set_env(ERMIS_STREAMS_PER_USER="2", ERMIS_STREAM_LEASE_S=str(lease_s))
    token = mint_token(sub="user_everywhere", org_id="org_everywhere", org_role="org:member")
    streams = OpenStreams()
    environment = {"ERMIS_STREAMS_PER_USER": "2", "ERMIS_STREAM_LEASE_S": str(lease_s)}
    with serve_in_thread(ROUTER) as here:
        with other_instance(**environment) as there:
            held_there = [(await streams.open(there + STREAM, token)).status for _ in range(2)]
            across = await refused(here + STREAM, token)
            await asyncio.sleep(lease_s * 1.5)  # the other instance renews its leases meanwhile
            still_across = await refused(here + STREAM, token)
        # The other instance is killed (SIGKILL) with both streams open: nobody releases them.
        await streams.close_all()
        freed, took, more = await eventually_open(here + STREAM, token, lease_s * 4)
        await more.close_all()
    get_settings.cache_clear()
    record("streams", "a 3rd stream on another instance; the slots of a killed instance", tried=3,
           bad=int(across.status_code != 429) + int(still_across.status_code != 429) + int(freed is None))  # fmt: skip
    assert held_there == [200, 200]
    assert_429(across, lease_s)
    assert still_across.status_code == 429  # renewed leases outlive their first term
    assert freed is not None and took <= lease_s + 1.5


NODE_EVENTSOURCE = PROJECT_ROOT / ".data/toolchain/eventsource-4.1.1/node_modules"


async def test_the_browser_client_backs_off_when_refused_and_streams_once_a_slot_frees(
    db, redis, set_env, mint_token
) -> None:
    """``ermis-realtime.js`` on npm's ``eventsource``: refused (429), it asks the HEAD why, waits
    the Retry-After (2 s) or its backoff, and tries again — a few attempts, not a storm — and
    streams once the slot it waited for is free."""
    set_env(ERMIS_STREAMS_PER_USER="1", ERMIS_STREAM_LEASE_S="2")
    token = mint_token(sub="user_waiting", org_id="org_waiting", org_role="org:member")
    streams = OpenStreams()
    with serve_in_thread(ROUTER) as url:
        assert (await streams.open(url + STREAM, token)).status == 200  # another tab holds the only slot
        client = subprocess.Popen(
            ["node", str(PROJECT_ROOT / "tests/support/refused_stream_client.mjs"), str(NODE_EVENTSOURCE),
             str(PROJECT_ROOT), url + STREAM, token],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        lines: list[dict] = []
        reader = asyncio.get_running_loop().run_in_executor(
            None, lambda: [lines.append(json.loads(line)) for line in client.stdout]
        )
        try:
            await asyncio.sleep(7)
            refused_attempts = [line for line in lines if line.get("attempt") == 429]
            await streams.close_all()  # the slot frees
            deadline = time.monotonic() + 10
            while not any(line.get("open") for line in lines) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        finally:
            client.terminate()
            client.wait(timeout=10)
            await reader
            client.stdout.close()
    heads = [line for line in lines if "head" in line]
    record("streams", "the browser client refused for 7 s (attempts beyond 5 = hammering)", tried=len(refused_attempts),
           bad=max(0, len(refused_attempts) - 5) + int(not any(line.get("open") for line in lines)))  # fmt: skip
    assert 2 <= len(refused_attempts) <= 5, lines  # it retried, spaced by the Retry-After
    assert heads and all(line == {**line, "head": 429, "retryAfter": "2"} for line in heads)
    gaps = [later["t"] - earlier["t"] for earlier, later in itertools.pairwise(refused_attempts)]
    assert min(gaps) >= 1900, gaps
    assert any(line.get("open") for line in lines), lines


async def test_a_redis_outage_under_many_streams_is_one_report_and_one_recovery(
    redis, set_env, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Forty streams claim and release their slots while Redis cannot be reached: the process
    reports the outage once (not per stream); back, it logs one recovery with the count."""
    sessions = [Session(f"user_{n}", "org_outage", None, None) for n in range(40)]
    SLOTS_OUTAGE.succeeded()
    capsys.readouterr()
    set_env(REDIS_URL="redis://127.0.0.1:9/0")  # nothing listens on port 9: refused at once
    await close_redis()
    slots = [await claim_stream_slot(session) for session in sessions]
    for slot in slots:
        slot.leased_keys = ("stream-slots:user:x",)  # as if claimed before the outage: release asks Redis
        await slot.release()
    set_env(REDIS_URL=redis_url)
    await close_redis()
    back = [await claim_stream_slot(session) for session in sessions[:3]]
    for slot in back:
        await slot.release()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    reports = [line for line in lines if line.get("context") == "streams:slots"]
    bad = int([line["level"] for line in reports] != ["error", "info"])
    record("streams", "a Redis outage under 40 streams' claims and releases: reports", tried=1, bad=bad)
    assert [(line["level"], line.get("step"), line.get("failures")) for line in reports] == [
        ("error", "claim", None),
        ("info", None, 80),
    ]
