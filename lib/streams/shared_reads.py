"""Coalesced reads: N connections asking for the same thing within a window cost one query.

``SharedReads().read(key, loader, window_s)`` returns the in-flight or recent result for
``key`` if it started less than ``window_s`` ago, otherwise starts ``loader()``. Streams pass
a window just under their poll interval, so each poll window costs one query per key. A rejected
read is evicted at once, so an error never sticks for a window. The spec coalesces only the
feed watermark (3.5 s under a 4 s poll); here every stream read goes through one of these,
keyed by tenant or user, so an instance's database load follows the tenants and users
connected, not the connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any


class SharedReads:
    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[float, asyncio.Future[Any]]] = {}

    async def read(self, key: Hashable, loader: Callable[[], Awaitable[Any]], window_s: float) -> Any:
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is not None and now - entry[0] < window_s and entry[1].get_loop() is asyncio.get_running_loop():
            return await asyncio.shield(entry[1])
        future: asyncio.Future[Any] = asyncio.ensure_future(loader())
        self._entries[key] = (now, future)
        try:
            return await asyncio.shield(future)
        except Exception:
            if self._entries.get(key, (0, None))[1] is future:
                del self._entries[key]
            raise
        finally:
            self._forget_expired(now, window_s)

    def _forget_expired(self, now: float, window_s: float) -> None:
        expired = [
            key for key, (started, future) in self._entries.items() if future.done() and now - started >= window_s
        ]
        for key in expired:
            del self._entries[key]
