"""Helpers for tests that drive ``lib.streams.listener`` and ``lib.streams.watch`` directly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lib.streams.listener import change_listener, channel_name
from lib.streams.watch import ChangeWatch, StreamTiming
from tests.support.waiting import eventually

SLOW_POLL = StreamTiming(poll_interval_s=20.0, max_duration_s=30.0)


def keyed_read(watch: ChangeWatch) -> Callable[[], asyncio.Future]:
    """A stream's read that answers the key it was started under."""

    def start() -> asyncio.Future:
        read = asyncio.get_running_loop().create_future()
        read.set_result(watch.current_key())
        return read

    return start


async def healthy_listener() -> None:
    listener = change_listener()
    with ChangeWatch(SLOW_POLL, ()).open():
        assert await eventually(lambda: asyncio.sleep(0, result=listener.healthy), timeout_s=10)


async def settled(*watches: ChangeWatch) -> None:
    """Each open watch's channels followed (a confirmed follow wakes its streams once, to read
    what came before it), then each watch's read key taken: a wake from now on is a change."""
    listener = change_listener()
    wanted = {channel_name(key) for watch in watches for key in watch.keys}
    assert await eventually(lambda: asyncio.sleep(0, result=wanted <= listener.followed), timeout_s=10)
    # The follows' own wakes (one per key, coalesced) have fired: none is still scheduled.
    assert await eventually(lambda: asyncio.sleep(0, result=not listener._pending), timeout_s=10)
    for watch in watches:
        watch.read_key()
