"""The cross-instance build lock: one catalog build at a time across every instance.

``SET <key> <token> NX PX <ttl>`` takes it; only the owner's token releases it (a Lua
compare-and-delete), so a slow build whose lock already expired cannot delete the next owner's
lock. The lease is short (``LOCK_TTL_MS``) and the owner renews it every ``RENEW_SECONDS``
while it builds (a Lua compare-and-expire), so a build may take as long as its function lives
while a crashed owner's lock lapses within ``LOCK_TTL_MS`` — not after a whole function
lifetime, during which every other instance would wait and then serve a stale catalog. A caller
that does not get the lock waits (polling) until it is gone, then reads what the owner built,
instead of building too. Without Redis — not configured, or unreachable when the lock is
taken — an in-process lock per key gives the same within one instance, so a Redis outage costs
at most one build per instance, never the tick.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from lib.observability import log_server_error
from lib.redis.client import get_redis
from lib.redis.commands import execute_command

LOCK_TTL_MS = 20_000
RENEW_SECONDS = 5.0
LOCK_WAIT_SECONDS = 60.0
POLL_SECONDS = 0.25

_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_RENEW_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_local_locks: dict[str, asyncio.Lock] = {}


async def _keep_renewing(client: object, key: str, token: str, ttl_ms: int) -> None:
    while True:
        await asyncio.sleep(RENEW_SECONDS)
        try:
            await execute_command(client, "EVAL", _RENEW_SCRIPT, 1, key, token, ttl_ms)
        except Exception as error:  # noqa: BLE001 - a missed renewal only shortens the lease
            log_server_error("aggregation:build-lock", error, key=key)


@asynccontextmanager
async def build_lock(
    key: str, ttl_ms: int = LOCK_TTL_MS, wait_seconds: float = LOCK_WAIT_SECONDS
) -> AsyncIterator[bool]:
    """Yields True when this caller holds the lock (and should build), False when another
    holder built (or is still building after ``wait_seconds``)."""
    client = get_redis()
    token = secrets.token_hex(16)
    taken: bool | None = None
    if client is not None:
        try:
            taken = bool(await execute_command(client, "SET", key, token, "NX", "PX", ttl_ms))
        except Exception as error:  # noqa: BLE001 - Redis down: one build per instance beats none
            log_server_error("aggregation:build-lock", error, key=key)
    if taken is None:
        lock = _local_locks.setdefault(key, asyncio.Lock())
        contended = lock.locked()
        async with lock:
            yield not contended
        return
    if taken:
        renewal = asyncio.create_task(_keep_renewing(client, key, token, ttl_ms))
        try:
            yield True
        finally:
            renewal.cancel()
            try:
                await execute_command(client, "EVAL", _RELEASE_SCRIPT, 1, key, token)
            except Exception as error:  # noqa: BLE001 - the short lease lapses by itself
                log_server_error("aggregation:build-lock", error, key=key)
        return
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if not await execute_command(client, "EXISTS", key):
            break
        await asyncio.sleep(POLL_SECONDS)
    yield False
