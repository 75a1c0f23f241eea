"""Waiting in tests for something another process or thread makes true (a claim taken, a lock
held, a statement blocked), polled on a short interval up to a limit — never a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0, every_s: float = 0.05) -> bool:
    """True as soon as ``check()`` is; False if it never was within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await check():
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(every_s)
