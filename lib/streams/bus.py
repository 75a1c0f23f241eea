"""The change bus: how the one change detector tells every stream process what advanced.

Two kinds of pub/sub channel per database (named after the stream log's epoch, so two
deployments or test databases sharing a Redis never hear each other):

- **one per stream-log channel**, ``ermis:changes:<epoch>:<channel>`` (``alerts|<tenant>``,
  ``user|<user id>``, ...): ``{"after": <position>, "head": <position>, "from": <process>,
  "at": <unix time>}`` when positions were drawn in it, with the rows in between where the
  detector read them (``tails``) (``publish_advanced``, one round trip for all the channels
  of a round). A process *follows* only the channels its open streams read (``Subscription.follow``;
  a platform-wide key — every tenant's drafts — follows the pattern ``...:drafts|*``), so a
  process is told about its own audiences and nothing else: a hundred processes cost a busy
  tenant's writes nothing in the processes that hold none of its streams. A follow is
  confirmed (``("following", channel)``) once Redis has it: what was positioned before it is
  then read, what after it is told — no gap.
- **one control channel**, ``ermis:changes:<epoch>``: ``{"leading": <process>}`` (the
  detector's heartbeat), ``{"released": <process>}`` (the detector let go of its lease: take it
  now, not at its expiry) and ``{"probe": <id>}`` (a subscriber proving its subscription before
  it trusts it). Every process subscribes to it: its count is the number of processes.

Each stream process subscribes on **one** connection (``subscription``), however many streams
and channels it follows; the database sees none of them. The same Redis holds the detector's
**lease** (``hold_lease``): one key, ``ermis:change-detector:<epoch>``, whose value names the
holder and since when, set if absent (or renewed by its holder) with an expiry, in one Lua
script, so two processes never both believe they lead for long. The lease only saves work: the
positioner's advisory lock, not the lease, keeps two detectors from positioning at once.

Which bus (``change_bus``):

- ``REDIS_URL`` (Upstash over the Redis protocol with ``rediss://``, ElastiCache, the embedded
  Redis): ``RedisBus``.
- No ``REDIS_URL``: ``LocalBus``, the same messages delivered inside this process — one
  process, local development. (With only Upstash's REST URL there is no bus either, by choice:
  its REST client cannot hold a subscription, and a detector per process would make every
  process poll Postgres; ``change_bus`` answers ``None`` and streams poll, ``listener``.)
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Iterable
from typing import Any

from lib.lazy_imports import lazy_import
from lib.platform import activity
from lib.redis.client import redis_kind
from lib.runtime.process import PROCESS
from lib.settings import get_settings, secret_or_none

redis_asyncio = lazy_import("redis.asyncio")
redis_retry = lazy_import("redis.asyncio.retry")
redis_backoff = lazy_import("redis.backoff")

PROBE_TIMEOUT_S = 2.0
IDLE_S = 1.0  # how long a subscription waits before yielding None (its reader checks for linger)

Message = dict[str, Any]

# KEYS: the lease. ARGV: the holder's value, the expiry (ms). 1: held (taken or renewed), 0: another holds it.
_HOLD_LEASE = """
local held = redis.call('GET', KEYS[1])
if not held then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if held == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
"""
_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lease_value(since: float) -> str:
    """What the lease holds while this process leads (since ``since``, unix time)."""
    return json.dumps({"process": PROCESS, "since": since})


# ("control", message) | ("advanced", (channel, message)) | ("following", channel)
Delivery = tuple[str, Any]
ANY_VALUE = "*"  # a channel name's value that follows every value of its kind (``listener.ANY``)


class Subscription(abc.ABC):
    """One process's subscription: the control channel, and the stream-log channels it
    ``follow``s. Iterating yields deliveries as they come, and ``None`` every ``IDLE_S`` without
    one. Follows and unfollows are applied by the iteration, between two reads of the
    connection: a stream asks from anywhere, the connection is used from one place."""

    def __init__(self) -> None:
        self.followed: set[str] = set()
        self._changes: dict[str, bool] = {}  # channel → follow (True) or unfollow (False), pending

    def follow(self, channel: str) -> None:
        self._changes[channel] = True

    def unfollow(self, channel: str) -> None:
        self._changes[channel] = False

    def _take_changes(self) -> dict[str, bool]:
        changes, self._changes = self._changes, {}
        return {channel: on for channel, on in changes.items() if on != (channel in self.followed)}

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[Delivery | None]:
        """The deliveries, as the bus's connection receives them (each bus its own way)."""


class RedisBus:
    """The bus over Redis pub/sub (``REDIS_URL``)."""

    name = "redis"

    def __init__(self, url: str, epoch: str) -> None:
        self.control = f"ermis:changes:{epoch}"
        self.prefix = f"{self.control}:"
        self.lease_key = f"ermis:change-detector:{epoch}"
        # Timeouts and health checks: a connection cut without a reset must fail, not hang. Two
        # quick retries: a pooled connection that went stale in a Redis restart is replaced, and
        # an outage fails within a second instead of redis-py's ten retries.
        self.client = redis_asyncio.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=5,
            socket_connect_timeout=5,
            health_check_interval=5,
            retry=redis_retry.Retry(redis_backoff.ExponentialBackoff(cap=0.5, base=0.05), 2),
        )

    async def publish(self, message: Message) -> None:
        await self.client.publish(self.control, _encoded(message))

    async def publish_advanced(self, messages: dict[str, Message], sender: str) -> None:
        at = time.time()
        async with self.client.pipeline(transaction=False) as pipeline:
            for channel, message in messages.items():
                pipeline.publish(self.prefix + channel, _encoded({**message, "from": sender, "at": at}))
            await pipeline.execute()

    @contextlib.asynccontextmanager
    async def subscription(self) -> AsyncIterator[Subscription]:
        """Subscribed to the control channel, and proved by a probe that comes back."""
        pubsub = self.client.pubsub()
        try:
            await pubsub.subscribe(self.control)
            probe = secrets.token_hex(8)
            await self.publish({"probe": probe})
            deadline = time.monotonic() + PROBE_TIMEOUT_S
            while (remaining := deadline - time.monotonic()) > 0:
                raw = await pubsub.get_message(timeout=remaining)
                if raw is not None and raw["type"] == "message" and _decoded(raw["data"]).get("probe") == probe:
                    break
            else:
                raise RuntimeError("the change bus's probe never came back")
            yield _RedisSubscription(self, pubsub)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def hold_lease(self, value: str, ttl_s: float) -> bool:
        return bool(await self.client.eval(_HOLD_LEASE, 1, self.lease_key, value, max(1, round(ttl_s * 1000))))

    async def release_lease(self, value: str) -> None:
        await self.client.eval(_RELEASE_LEASE, 1, self.lease_key, value)

    async def leader(self) -> dict[str, Any] | None:
        held = await self.client.get(self.lease_key)
        return None if held is None else _decoded(held)

    async def subscribers(self) -> int:
        counts = await self.client.pubsub_numsub(self.control)
        return int(counts[0][1]) if counts else 0

    async def followed(self, channels: Iterable[str]) -> set[str]:
        """Which of ``channels`` some process follows now: one round trip. A platform-wide
        channel (``<kind>|*``) is followed by pattern, which Redis does not count: it always is."""
        wanted = list(channels)
        counts = await self.client.pubsub_numsub(*(self.prefix + channel for channel in wanted)) if wanted else []
        by_count = {name.removeprefix(self.prefix) for name, count in counts if int(count)}
        return by_count | {channel for channel in wanted if channel.endswith("|" + ANY_VALUE)}

    async def close(self) -> None:
        await self.client.aclose()


class _RedisSubscription(Subscription):
    APPLY_S = 0.25  # how soon a follow asked for between two messages reaches Redis (no gap: ``following``)

    def __init__(self, bus: RedisBus, pubsub: Any) -> None:
        super().__init__()
        self.bus, self.pubsub = bus, pubsub

    async def _apply(self) -> None:
        for channel, on in self._take_changes().items():
            # A platform-wide key follows every value of its kind: a pattern built from the kind
            # alone (``<kind>|*``); every other channel exactly, so no tenant's name is a pattern.
            name = self.bus.prefix + channel
            if channel.endswith("|" + ANY_VALUE):
                await (self.pubsub.psubscribe(name) if on else self.pubsub.punsubscribe(name))
            else:
                await (self.pubsub.subscribe(name) if on else self.pubsub.unsubscribe(name))
            (self.followed.add if on else self.followed.discard)(channel)

    async def __aiter__(self) -> AsyncIterator[Delivery | None]:  # type: ignore[override]
        idle_since = time.monotonic()
        while True:
            await self._apply()
            raw = await self.pubsub.get_message(timeout=self.APPLY_S)
            if raw is None:
                if time.monotonic() - idle_since >= IDLE_S:
                    idle_since = time.monotonic()
                    yield None
                continue
            idle_since = time.monotonic()
            delivered = self._delivery(raw)
            if delivered is not None:
                yield delivered

    def _delivery(self, raw: dict[str, Any]) -> Delivery | None:
        kind, name = raw["type"], raw["channel"]
        if kind in ("subscribe", "psubscribe"):
            return None if name == self.bus.control else ("following", name.removeprefix(self.bus.prefix))
        if kind == "message" and name == self.bus.control:
            return ("control", _decoded(raw["data"]))
        if kind in ("message", "pmessage"):
            return ("advanced", (name.removeprefix(self.bus.prefix), _decoded(raw["data"])))
        return None


def _encoded(message: Message) -> str:
    return json.dumps(message, separators=(",", ":"))


def _decoded(data: Any) -> Message:
    try:
        message = json.loads(data)
    except (TypeError, ValueError):
        return {}
    return message if isinstance(message, dict) else {}


class LocalBus:
    """The bus inside one process (no ``REDIS_URL``): the same deliveries, no network."""

    name = "in-process"

    def __init__(self) -> None:
        self._subscriptions: set[_LocalSubscription] = set()
        self._lease: tuple[str, float] | None = None

    async def publish(self, message: Message) -> None:
        for subscription in self._subscriptions:
            subscription.queue.put_nowait(("control", message))

    async def publish_advanced(self, messages: dict[str, Message], sender: str) -> None:
        at = time.time()
        for subscription in self._subscriptions:
            for channel, message in messages.items():
                if subscription.follows(channel):
                    subscription.queue.put_nowait(("advanced", (channel, {**message, "from": sender, "at": at})))

    @contextlib.asynccontextmanager
    async def subscription(self) -> AsyncIterator[Subscription]:
        subscription = _LocalSubscription()
        self._subscriptions.add(subscription)
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)

    async def hold_lease(self, value: str, ttl_s: float) -> bool:
        now = time.monotonic()
        if self._lease is None or self._lease[0] == value or self._lease[1] < now:
            self._lease = (value, now + ttl_s)
            return True
        return False

    async def release_lease(self, value: str) -> None:
        if self._lease is not None and self._lease[0] == value:
            self._lease = None

    async def leader(self) -> dict[str, Any] | None:
        return None if self._lease is None or self._lease[1] < time.monotonic() else _decoded(self._lease[0])

    async def subscribers(self) -> int:
        return len(self._subscriptions)

    async def followed(self, channels: Iterable[str]) -> set[str]:
        return {channel for channel in channels if any(s.follows(channel) for s in self._subscriptions)}

    async def close(self) -> None:
        self._subscriptions.clear()


class _LocalSubscription(Subscription):
    def __init__(self) -> None:
        super().__init__()
        self.queue: asyncio.Queue[Delivery] = asyncio.Queue()

    def follow(self, channel: str) -> None:
        super().follow(channel)
        self.queue.put_nowait(("apply", None))

    def unfollow(self, channel: str) -> None:
        super().unfollow(channel)
        self.queue.put_nowait(("apply", None))

    def follows(self, channel: str) -> bool:
        kind = channel.partition("|")[0]
        return channel in self.followed or f"{kind}|{ANY_VALUE}" in self.followed

    async def __aiter__(self) -> AsyncIterator[Delivery | None]:  # type: ignore[override]
        while True:
            for channel, on in self._take_changes().items():
                (self.followed.add if on else self.followed.discard)(channel)
                if on:
                    yield ("following", channel)
            try:
                delivery = await asyncio.wait_for(self.queue.get(), IDLE_S)
            except TimeoutError:
                yield None
                continue
            if delivery[0] != "apply":
                yield delivery


ChangeBus = RedisBus | LocalBus  # what ``change_bus`` answers: the same surface over Redis or in-process

_buses: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[tuple[str | None, str | None], ChangeBus]] = (
    weakref.WeakKeyDictionary()
)


async def change_bus() -> ChangeBus | None:
    """This event loop's bus: over ``REDIS_URL``, in-process without Redis, ``None`` (streams
    poll) with only Upstash's REST URL."""
    settings = get_settings()
    url = secret_or_none(settings.redis_url)
    if url is None and redis_kind() == "upstash":
        return None
    loop = asyncio.get_running_loop()
    cached = _buses.get(loop)
    where = (url, secret_or_none(settings.database_url))  # the epoch is the database's
    if cached is not None and cached[0] == where:
        return cached[1]
    if cached is not None:
        await cached[1].close()
    bus: ChangeBus = LocalBus() if url is None else RedisBus(url, await activity.stream_log_epoch())
    _buses[loop] = (where, bus)
    return bus


async def close_change_bus() -> None:
    """Close this loop's bus (tests; the server as it stops)."""
    cached = _buses.pop(asyncio.get_running_loop(), None)
    if cached is not None:
        await cached[1].close()
