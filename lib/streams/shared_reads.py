"""Coalesced reads: N connections asking for the same thing within a window cost one query.

``SharedReads().start(key, loader, window_s, version)`` returns the in-flight or recent read of
``key`` (an ``asyncio.Future``) if it is of the same ``version`` and started less than
``window_s`` ago, otherwise starts ``loader()``; ``read`` awaits it. The key names what is read
(a tenant's alerts, a user's audience), the version which state of it (the change or poll tick
it answers): one read is kept per key, the latest, so a superseded result is freed as soon as
the next one starts — with a change a second and a 52-second window, each audience would
otherwise hold fifty results, every one of them scanned by the garbage collector's passes.

A connection's first read shares only reads that began after the connection was accepted: the
version says which change a read answers *as far as this process heard*, and while no stream of
the process followed the key (the last one closed) it heard nothing — a read from before such a
gap would answer the new connection with what it had before (``not_before``).

A stream that needs several reads starts them all, then awaits each: the loads run together,
and a thousand waiting streams cost a thousand callbacks, not a thousand tasks. Waiting is
shielded, so a stream that goes away never cancels a read others share. A failed read is
evicted at once, so an error never sticks for a window. The window is just under the poll
interval, so each change or poll window costs one query per key. The spec coalesces only the
feed watermark (3.5 s under a 4 s poll); here every stream read goes through one of these,
keyed by tenant or user, so an instance's database load follows the tenants and users
connected, not the connections.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, NamedTuple

Loader = Callable[[], Coroutine[Any, Any, Any]]


class _Entry(NamedTuple):
    version: Hashable
    made_at: float  # its window starts here
    read: asyncio.Future[Any]
    began: list[float | None]  # when the loader began to run: [None] until then


class SharedReads:
    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry] = {}

    def start(
        self,
        key: Hashable,
        loader: Loader,
        window_s: float,
        version: Hashable = None,
        not_before: float | None = None,
    ) -> asyncio.Future[Any]:
        """``not_before`` (``time.monotonic()``): a read that began earlier never answers this one
        — a connection's first read passes when it was accepted (``ChangeWatch.fresh_since``). Such
        a read starts at the loop's next turn instead of at once, so every connection accepted in
        the same turn (a reconnect storm) shares it."""
        now = time.monotonic()
        entry = self._entries.get(key)
        if (
            entry is not None
            and entry.version == version
            and now - entry.made_at < window_s
            and (not_before is None or entry.began[0] is None or entry.began[0] >= not_before)
            and entry.read.get_loop() is asyncio.get_running_loop()
        ):
            return entry.read
        self._forget_expired(now, window_s)
        began: list[float | None] = [None]
        future = _start(_timed(loader, began), at_once=not_before is None)
        self._entries.pop(key, None)  # (re)inserted last: the entries stay in the order they started
        self._entries[key] = _Entry(version, now, future, began)
        if future.done():  # it failed (or finished) before its first wait
            self._evict_if_failed(key, future)
        else:
            future.add_done_callback(lambda done: self._evict_if_failed(key, done))
        return future

    async def read(self, key: Hashable, loader: Loader, window_s: float) -> Any:
        return await asyncio.shield(self.start(key, loader, window_s))

    def _evict_if_failed(self, key: Hashable, done: asyncio.Future[Any]) -> None:
        entry = self._entries.get(key)
        if (done.cancelled() or done.exception() is not None) and entry is not None and entry.read is done:
            del self._entries[key]

    def _forget_expired(self, now: float, window_s: float) -> None:
        """Oldest first, up to the first still in its window (or in flight): a sweep costs what it
        removes, not every entry."""
        expired = []
        for key, entry in self._entries.items():
            if now - entry.made_at < window_s or not entry.read.done():
                break
            expired.append(key)
        for key in expired:
            del self._entries[key]


async def _timed(loader: Loader, began: list[float | None]) -> Any:
    began[0] = time.monotonic()
    return await loader()


def _start(load: Coroutine[Any, Any, Any], at_once: bool) -> asyncio.Future[Any]:
    """``load`` as a task. ``at_once``: it runs now, up to its first wait (its query on the wire),
    instead of behind every callback already queued: a change wakes hundreds of streams at once,
    and a task started the usual way would send the one query they all wait for only after all
    of them had taken their turn (measured: 30-50 ms of a burst's latency)."""
    if at_once and sys.version_info >= (3, 12):
        return asyncio.Task(load, loop=asyncio.get_running_loop(), eager_start=True)
    return asyncio.ensure_future(load)
