"""Caps on the streams one user and one tenant hold open (issue 21).

Each open stream holds memory and a function slot for up to its self-close, so one user (a
script, a tab left in a loop) or one tenant must not hold them all. Before a stream starts, its
handler claims a *slot* (``claim_stream_slot``) under two caps, ``ERMIS_STREAMS_PER_USER``
(default 12: three tabs' worth of the notification, feed and story streams is far less, as
``ermis-realtime.js`` shares one connection per stream across an origin's tabs) and
``ERMIS_STREAMS_PER_TENANT`` (default 500):

- **in this process**, always: a count per user and per tenant;
- **across instances**, where Redis is configured: a *lease* per stream — a member of one
  sorted set per user and one per tenant (``stream-slots:user:<id>``, ``stream-slots:tenant:<id>``)
  whose score is the time the lease expires. One Lua script drops the expired members, checks
  both counts and adds the lease to both sets, so two instances cannot both take the last slot.
  The stream renews its lease every third of ``ERMIS_STREAM_LEASE_S`` (default 60 s) and removes
  it when it ends; an instance that dies stops renewing, and its slots free themselves within
  the lease time.

Over a cap: 429 ``too_many_streams`` with ``Retry-After`` (the lease time: the longest a dead
instance's slot stays taken) — ``ermis-realtime.js`` then polls, asks the stream's ``HEAD`` why it
was refused, and opens it again after that, backing off. Redis unreachable while claiming: the
process's cap still holds and the stream opens — the cap guards capacity, it authenticates
nothing, so it does not take the streams down with Redis. The outage is reported once per
process, whatever the streams' claims, renewals and releases meet meanwhile, and its end once
(``SLOTS_OUTAGE``).
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from lib.auth.sessions import Session
from lib.http.errors import ApiError
from lib.observability import OutageReport
from lib.redis.client import get_redis
from lib.redis.commands import execute_command, execute_pipeline
from lib.settings import get_settings
from lib.streams.sse import EventStreamResponse

KEY_PREFIX = "stream-slots"

# KEYS: the user's set, then the tenant's (if any). ARGV: now (ms), the lease's expiry (ms), the
# lease id, the user cap, the tenant cap. Answers 0 (claimed), 1 (user full) or 2 (tenant full).
_CLAIM_SCRIPT = """
for _, key in ipairs(KEYS) do redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[1]) end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 1 end
if KEYS[2] and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 2 end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[2], ARGV[3])
  redis.call('PEXPIREAT', key, ARGV[2])
end
return 0
"""

_held: Counter[tuple[str, str]] = Counter()  # ("user" | "tenant", id) → streams open in this process
# Every slot's claim, renewal and release in this process: one report per Redis outage, one recovery.
SLOTS_OUTAGE = OutageReport("streams:slots")


@dataclass
class StreamSlot:
    """One stream's place under the caps: held until ``release``."""

    holders: tuple[tuple[str, str], ...]
    lease_id: str
    leased_keys: tuple[str, ...] = ()
    released: bool = False
    _renewal: asyncio.Task[None] | None = field(default=None, repr=False)

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        for holder in self.holders:
            _held[holder] -= 1
            if _held[holder] <= 0:
                del _held[holder]
        if self._renewal is not None:
            # The renewal task's frame holds this slot: let go of the task, or the two (and the
            # cancelled task's traceback) wait for the collector instead of going now.
            renewal, self._renewal = self._renewal, None
            renewal.cancel()
        if self.leased_keys and (client := get_redis()) is not None:
            try:
                await execute_pipeline(client, [("ZREM", key, self.lease_id) for key in self.leased_keys])
            except Exception as error:  # noqa: BLE001 - the lease lapses on its own
                SLOTS_OUTAGE.failed(error, step="release")
            else:
                SLOTS_OUTAGE.succeeded()

    async def _keep_renewing(self, client: object, lease_s: float) -> None:
        while True:
            await asyncio.sleep(lease_s / 3)
            expiry = int((time.time() + lease_s) * 1000)
            renewals = [("ZADD", key, "XX", expiry, self.lease_id) for key in self.leased_keys]
            try:
                await execute_pipeline(client, renewals + [("PEXPIREAT", key, expiry) for key in self.leased_keys])
            except Exception as error:  # noqa: BLE001 - one missed renewal leaves a third of the lease
                SLOTS_OUTAGE.failed(error, step="renew")
            else:
                SLOTS_OUTAGE.succeeded()


def _too_many(whose: str, lease_s: float) -> ApiError:
    retry_after = str(math.ceil(lease_s))
    return ApiError(
        429,
        "too_many_streams",
        f"Too many streams are open for this {whose}; poll, and open the stream again later.",
        retry_after=retry_after,
    )


async def claim_stream_slot(session: Session) -> StreamSlot:
    """A slot for one more stream of this session's user and tenant, or a 429 ``ApiError``."""
    settings = get_settings()
    caps = {"user": settings.ermis_streams_per_user, "tenant": settings.ermis_streams_per_tenant}
    holders = (("user", session.user_id),)
    if session.tenant_scope_id is not None:
        holders += (("tenant", session.tenant_scope_id),)
    for holder in holders:
        if _held[holder] >= caps[holder[0]]:
            raise _too_many(holder[0], settings.ermis_stream_lease_s)
    for holder in holders:
        _held[holder] += 1
    slot = StreamSlot(holders, secrets.token_hex(8))
    client = get_redis()
    if client is None:
        return slot
    keys = tuple(f"{KEY_PREFIX}:{kind}:{value}" for kind, value in holders)
    lease_s = settings.ermis_stream_lease_s
    now_ms = int(time.time() * 1000)
    try:
        outcome = await execute_command(
            client, "EVAL", _CLAIM_SCRIPT, len(keys), *keys,
            now_ms, now_ms + int(lease_s * 1000), slot.lease_id, caps["user"], caps["tenant"],
        )  # fmt: skip
    except Exception as error:  # noqa: BLE001 - see the module docstring: the process cap holds
        SLOTS_OUTAGE.failed(error, step="claim")
        return slot
    SLOTS_OUTAGE.succeeded()
    if int(outcome) != 0:
        await slot.release()
        raise _too_many("user" if int(outcome) == 1 else "tenant", lease_s)
    slot.leased_keys = keys
    slot._renewal = asyncio.create_task(slot._keep_renewing(client, lease_s))
    return slot


async def open_streams_by_tenant() -> dict[str, int]:
    """Streams open per tenant: across instances from their leases in Redis (a lease that has
    expired is not counted), or this process's own count without Redis."""
    client = get_redis()
    if client is None:
        return {value: count for (kind, value), count in _held.items() if kind == "tenant"}
    prefix = f"{KEY_PREFIX}:tenant:"
    now_ms = int(time.time() * 1000)
    counts: dict[str, int] = {}
    cursor = "0"
    while True:  # SCAN: a cluster of tenants is never read in one blocking command
        cursor, keys = await execute_command(client, "SCAN", cursor, "MATCH", f"{prefix}*", "COUNT", 500)
        if keys:
            held = await execute_pipeline(client, [("ZCOUNT", key, now_ms, "+inf") for key in keys])
            counts.update({key[len(prefix) :]: int(n) for key, n in zip(keys, held, strict=True) if int(n)})
        if str(cursor) == "0":
            return dict(sorted(counts.items(), key=lambda item: -item[1]))


async def limited_stream(request: Request, session: Session, name: str, frames: AsyncIterator[bytes]) -> Response:
    """The stream's response once it has a slot; over a cap, the 429. A HEAD answers what a GET
    would (``ermis-realtime.js`` asks it why a stream was refused) and keeps no slot."""
    slot = await claim_stream_slot(session)
    if request.method == "HEAD":
        await slot.release()
        return EventStreamResponse(name, frames)
    return EventStreamResponse(name, frames, on_end=slot.release, session_s=session.verifies_for_s())
