"""lib.streams.watch: a failed read is reported, skipped and read again; ticks are shared within
a tenant and spread across tenants."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
from collections.abc import Callable, Iterator

import pytest

from lib.clock import Deadline
from lib.streams.sse import open_streams
from lib.streams.watch import ChangeWatch, tick_phase
from tests.support.catalogs import add_draft
from tests.support.functions import load_api_app
from tests.support.listener import SLOW_POLL, healthy_listener
from tests.support.servers import serve_in_thread
from tests.support.waiting import eventually


async def test_a_failed_read_is_reported_skipped_and_read_again_on_the_next_change(
    db, capsys: pytest.CaptureFixture[str]
) -> None:
    await healthy_listener()
    watch = ChangeWatch(SLOW_POLL, (("drafts", "org_f"),))
    outcomes: Iterator[BaseException | str] = iter([RuntimeError("database away"), "read again"])

    def start_read() -> asyncio.Future:
        read = asyncio.get_running_loop().create_future()
        outcome = next(outcomes)
        if isinstance(outcome, BaseException):
            read.set_exception(outcome)
        else:
            read.set_result(outcome)
        return read

    reads = watch.reads(Deadline.after(2), "f", start_read, "/test/events", tenant="org_f")
    following = asyncio.ensure_future(anext(reads))
    await asyncio.sleep(0.3)
    assert not following.done()  # the failed read was skipped: the stream waits for a reason to read
    await add_draft(db, "org_f", "s1")
    assert await following == "read again"
    assert [read async for read in reads] == []  # nothing changed until its deadline: it ends
    [reported] = [json.loads(line) for line in capsys.readouterr().err.splitlines() if "/test/events" in line]
    assert reported["error"] == "RuntimeError: database away" and reported["tenant"] == "org_f"


def test_ticks_are_shared_within_a_tenant_and_spread_across_tenants() -> None:
    # Every stream of a tenant — whoever its user, whatever else it watches — ticks together
    # with the others (they share reads)...
    same_tenant = [(("alerts", "org_a"), ("user", f"user_{n}"), ("review", "org_a")) for n in range(5)]
    assert {tick_phase(keys) for keys in same_tenant} == {tick_phase((("alerts", "org_a"),))}
    # ...and the tenants' ticks fall all over the interval, not all at the top of the minute.
    phases = sorted(tick_phase((("alerts", f"org_{n}"),)) for n in range(100))
    assert phases[0] < 0.1 and phases[-1] > 0.9
    assert max(b - a for a, b in itertools.pairwise(phases)) < 0.2


async def test_an_ended_streams_watch_leaves_nothing_for_the_collector(
    db, redis, mint_token: Callable[..., str]
) -> None:
    """What a stream's watch held (the watch, the audience, the cursor, the timing) goes when the
    stream ends, by reference counting: the watch held its own bound method and a closure over
    itself, a cycle that waited for a full collection — which ``scripts/serve`` makes rare — so
    memory grew with every ended connection."""
    token = mint_token(sub="user_gc", org_id="org_gc", org_role="org:owner")
    with serve_in_thread(load_api_app("api/notifications/events.py")) as url:
        host, port = url.removeprefix("http://").split(":")

        async def open_read_close() -> None:
            reader, writer = await asyncio.open_connection(host, int(port))
            head = f"GET /api/notifications/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            writer.write(head.encode() + b"\r\n")
            async with asyncio.timeout(10):
                assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
                await reader.readuntil(b"\r\n\r\n")  # the first frame
            writer.close()
            await writer.wait_closed()

        await open_read_close()  # the first stream loads what every stream shares
        await eventually(lambda: asyncio.sleep(0, result=open_streams["notifications"] == 0))
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(20):
                await open_read_close()
            assert await eventually(lambda: asyncio.sleep(0, result=open_streams["notifications"] == 0))
            await asyncio.sleep(0.2)
            gc.collect()
            ours = sorted({type(item).__qualname__ for item in gc.garbage if type(item).__module__.startswith("lib.")})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert not {"ChangeWatch", "Audience", "Cursor", "StreamTiming"} & set(ours), ours
