"""lib.streams.watch: a failed read is reported, skipped and read again; ticks are shared within
a tenant and spread across tenants."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator

import pytest

from lib.clock import Deadline
from lib.streams.watch import ChangeWatch, tick_phase
from tests.support.catalogs import add_draft
from tests.support.listener import SLOW_POLL, healthy_listener


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
