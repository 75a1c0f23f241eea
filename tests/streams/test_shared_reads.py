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


async def test_reads_past_their_window_are_forgotten_oldest_first() -> None:
    shared = SharedReads()

    async def load() -> str:
        return "rows"

    for key in ("a", "b", "c"):
        await shared.start(key, load, 0.05)
    await asyncio.sleep(0.06)
    await shared.start("a", load, 0.05)  # read again: now the newest
    await shared.start("d", load, 0.05)  # sweeps b and c, keeps the new a
    assert list(shared._entries) == ["a", "d"]


async def test_a_new_version_replaces_the_read_of_its_key() -> None:
    shared = SharedReads()
    versions: list[int] = []

    def load(version: int):
        async def read() -> int:
            versions.append(version)
            return version

        return read

    first = shared.start("tenant", load(1), 60, version=1)
    assert shared.start("tenant", load(1), 60, version=1) is first  # the same version is shared
    second = shared.start("tenant", load(2), 60, version=2)
    assert await second == 2 and versions == [1, 2]
    assert [entry[2] for entry in shared._entries.values()] == [second]  # the superseded one let go
