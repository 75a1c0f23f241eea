"""Coalesced reads: one load per key and window, started at once, failures never shared."""

from __future__ import annotations

import asyncio
import sys

import pytest

from lib.streams.shared_reads import SharedReads


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager tasks are Python 3.12's (Vercel's runtime)")
async def test_a_read_is_on_its_way_before_the_callbacks_already_queued() -> None:
    shared = SharedReads()
    order: list[str] = []
    asyncio.get_running_loop().call_soon(order.append, "a callback queued before")

    async def load() -> str:
        order.append("query sent")
        await asyncio.sleep(0)
        return "rows"

    read = shared.start("tenant", load, 5)
    assert order == ["query sent"]  # sent now, not after the queued callback's turn
    assert await read == "rows"
    assert shared.start("tenant", load, 5) is read  # shared within its window


async def test_a_read_that_fails_before_its_first_wait_is_not_shared() -> None:
    shared = SharedReads()
    calls: list[str] = []

    async def failing() -> str:
        calls.append("load")
        raise RuntimeError("db down")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            await shared.start("tenant", failing, 5)
    assert calls == ["load", "load"]
