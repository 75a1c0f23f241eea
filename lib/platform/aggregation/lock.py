"""The cross-instance build lock: one catalog build at a time across every instance.

``SET <key> <token> NX PX <ttl>`` takes it; only the owner's token releases it (a Lua
compare-and-delete), so a slow build whose lock already expired cannot delete the next owner's
lock; a crashed owner's lock expires after ``LOCK_TTL_MS``. A caller that does not get the lock
waits (polling) until it is gone, then reads what the owner built, instead of building too.
Without Redis, an in-process lock per key gives the same within one instance.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from lib.redis.client import get_redis
from lib.redis.commands import execute_command

LOCK_TTL_MS = 290_000  # below the function's 300 s cap: a killed build never outlives its lock for long
LOCK_WAIT_SECONDS = 60.0
POLL_SECONDS = 0.25

_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_local_locks: dict[str, asyncio.Lock] = {}


@asynccontextmanager
async def build_lock(
    key: str, ttl_ms: int = LOCK_TTL_MS, wait_seconds: float = LOCK_WAIT_SECONDS
) -> AsyncIterator[bool]:
    """Yields True when this caller holds the lock (and should build), False when another
    holder built (or is still building after ``wait_seconds``)."""
    client = get_redis()
    if client is None:
        lock = _local_locks.setdefault(key, asyncio.Lock())
        contended = lock.locked()
        async with lock:
            yield not contended
        return
    token = secrets.token_hex(16)
    if await execute_command(client, "SET", key, token, "NX", "PX", ttl_ms):
        try:
            yield True
        finally:
            await execute_command(client, "EVAL", _RELEASE_SCRIPT, 1, key, token)
        return
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if not await execute_command(client, "EXISTS", key):
            break
        await asyncio.sleep(POLL_SECONDS)
    yield False
