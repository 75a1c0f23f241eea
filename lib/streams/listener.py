"""The listener: which audiences changed, told by the change bus, and who is waiting for them.

A change flows one way through ``lib/streams``: a row is written → its table's triggers log it
in the stream log (``lib.platform.activity``) → the change detector positions it after commit and
publishes which channels advanced (``detector``, ``bus``) — ``alerts|<tenant>``,
``deliveries|<tenant>`` (failed ones only), ``review|<tenant>`` and ``review|*``,
``drafts|<tenant>``, ``user|<user id>`` — with the new rows, read once and shaped, where they fit
→ **this module** keeps the rows told of the channels it follows (``tails``), bumps that
audience's version and starts the read each waiting stream will need (answered from the tail
when it covers the stream) → ``watch``
hands the read to the stream waiting on it → the stream turns what was read into frames
(``notifications``, ``feed``, ``story``) → ``sse`` writes them.

The model:

- **One subscription per process** (per event loop), opened by the first stream and closed
  ``LINGER_S`` after the last one leaves: one Redis connection (``bus``), proved by a probe
  before it is trusted. It follows the channel of each key its open streams watch (and stops
  ``LINGER_S`` after the last of them closes), so a process hears of its own audiences only;
  a follow, once confirmed, wakes the key's streams once — what was positioned before it is
  read, what after it is told. The same first stream makes the process a candidate for the detector's
  lease (``detector``). Without ``REDIS_URL`` the bus is in-process; with only Upstash's REST
  URL there is none, and streams poll.
- **An audience key** is ``(kind, value)`` — a stream log channel's name split at its ``|``
  (``audience_key``); a stream waits on the keys its reads depend on (a platform-wide reader
  waits on ``(kind, "*")``, woken by every value of that kind). Keys carry the authorization of
  the reads that follow: a change in tenant B can only wake keys of tenant B, and what a woken
  stream sends is still decided by its read.
- **Coalescing** (``coalescing``): a key that changed gets a new *version* and its waiters
  wake at once — at most once per window per key: ``COALESCE_S`` (25 ms) for a quiet key,
  doubling while it stays busy up to ``MAX_COALESCE_S`` (200 ms). The first change after a
  quiet spell wakes immediately; later ones are gathered into one wake at the window's end, so
  every process holding a busy tenant's streams reads it five times a second, not forty. Streams key
  their shared reads by those versions, so a burst costs one read per audience per window, and a
  lone change waits for nothing.
- **Read ahead**: a change starts the *reads* first, then wakes the streams. A waiting stream
  names its read (a share key — its audience — and how to start its shared read); the listener
  starts each distinct one once and wakes its streams when it is done, handing them the read.
  Woken first, a thousand streams would each take a turn before the one query they wait for was
  even sent, and another to pick up its result — most of a burst's latency, measured.
- **Shutdown**: ``end_streams()`` (called by the server as it stops) ends every stream of the
  process at its next wait, with a clean end of body, so the browsers reconnect elsewhere.
- **Health**: when the subscription cannot be made, fails its probe, or drops (Redis stopped,
  the network cut), or no detector's heartbeat has been heard for a while (``detector``), push
  is *unhealthy*: the outage is reported once through
  ``log_server_error``, streams poll (``watch``) — each read making sure every committed row is
  positioned first (``positioner``) — and the subscription is retried with backoff. Every change
  of health wakes every waiter and starts a new *epoch* of read keys: the changes made meanwhile
  were not told, so every stream reads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from lib.observability import log_server_error
from lib.streams.bus import ChangeBus, Delivery, Subscription, change_bus, close_change_bus
from lib.streams.coalescing import CoalescingWindows
from lib.streams.detector import ChangeDetector, publish_advanced, silence_limit_s
from lib.streams.positioner import positioned_now
from lib.streams.tails import ChannelTails

COALESCE_S = 0.025
MAX_COALESCE_S = 0.2
LINGER_S = 30.0
RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
ANY = "*"
HEALTH = ("listener", "health")  # what a stream that waits on no key (polling) waits on

AudienceKey = tuple[str, str]
Started = tuple[Hashable, asyncio.Future[Any]]  # a read and the read key it was started under
ReadAhead = tuple[Hashable, Callable[[], Started]]  # (share key, start): the read a change makes a stream do

# Set while the listener starts the reads a change makes: they may read the channel tails it was
# told (``tails``); every other read — connect, next page, tick, poll — reads Postgres.
_for_a_change: contextvars.ContextVar[bool] = contextvars.ContextVar("ermis_read_for_a_change", default=False)


def reading_for_a_change() -> bool:
    """Whether the read being started was started by a change the bus told (``tails``)."""
    return _for_a_change.get()


def channel_name(key: AudienceKey) -> str:
    """The stream-log channel (or, for ``(kind, ANY)``, every channel of the kind) a key follows."""
    return f"{key[0]}|{key[1]}"


def audience_key(name: str) -> AudienceKey:
    """``'<kind>|<value>'`` — a stream log channel — as its key."""
    kind, _, value = name.partition("|")
    return (kind, value)


class ChangeListener:
    """The process's (event loop's) listening connection and the streams waiting on it."""

    def __init__(self) -> None:
        self.healthy = False
        self.epoch = 0  # bumped on every health change: a read key from before is stale
        self.generation = 0  # bumped on every change of a version or the health: read keys to recompute
        self.versions: dict[AudienceKey, int] = {}
        self._read_keys: dict[tuple[AudienceKey, ...], tuple[tuple[int, int], dict[AudienceKey, Hashable]]] = {}
        self._waiters: dict[Hashable, set[asyncio.Future[Started | None]]] = {}
        self._read_aheads: dict[asyncio.Future[Started | None], ReadAhead] = {}
        self._pending: set[AudienceKey] = set()
        self._windows = CoalescingWindows(COALESCE_S, MAX_COALESCE_S)
        self._watchers = 0
        self._task: asyncio.Task[None] | None = None
        self._idle_since: float | None = None
        self._outage_reported = False
        self.ending = False
        self.detector: ChangeDetector | None = None
        self._detector_heard_at = 0.0  # the last heartbeat of a leading detector (monotonic)
        self._key_watchers: Counter[AudienceKey] = Counter()  # streams open per key
        self._unwatched_since: dict[AudienceKey, float] = {}  # keys still followed, no stream on them
        self._subscription: Subscription | None = None
        self.followed: set[str] = set()  # the channels Redis has confirmed this process follows
        self.tails = ChannelTails()  # the rows the bus told of the channels followed (``tails``)

    # -- the streams' side ------------------------------------------------------------------

    @contextmanager
    def watching(self, keys: tuple[AudienceKey, ...] = ()) -> Iterator[None]:
        """A stream is open on ``keys``: the process subscribes (and is a detector candidate)
        while any is, and follows each key's channel while a stream watches it."""
        self._watchers += 1
        self._idle_since = None
        for key in keys:
            self._key_watchers[key] += 1
            self._unwatched_since.pop(key, None)
            if self._subscription is not None:
                self._subscription.follow(channel_name(key))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ermis-change-listener")
        try:
            yield
        finally:
            self._watchers -= 1
            if self._watchers == 0:
                self._idle_since = time.monotonic()
            for key in keys:
                self._key_watchers[key] -= 1
                if self._key_watchers[key] <= 0:
                    del self._key_watchers[key]
                    self._unwatched_since[key] = time.monotonic()

    def _unfollow_lingered(self) -> None:
        """Unfollow the channels no stream has watched for ``LINGER_S`` (not at once: streams of
        an audience come and go, and each follow costs a round trip and a re-read)."""
        now = time.monotonic()
        for key, since in list(self._unwatched_since.items()):
            if now - since > LINGER_S:
                del self._unwatched_since[key]
                self.followed.discard(channel_name(key))
                self.tails.forget(channel_name(key))
                if self._subscription is not None:
                    self._subscription.unfollow(channel_name(key))

    def read_keys(self, keys: tuple[AudienceKey, ...], tick: int) -> dict[AudienceKey, Hashable]:
        """What a read that depends on each of ``keys`` alone is shared under at ``tick``: its
        version with push, the tick alone without. Made once per change for all the streams
        watching the same keys (the same, not to be changed, dict)."""
        state = (self.generation, tick)
        cached = self._read_keys.get(keys)
        if cached is not None and cached[0] == state:
            return cached[1]
        if len(self._read_keys) > 4096:  # the keys of streams gone long ago
            self._read_keys.clear()
        if self.healthy:
            by_key: dict[AudienceKey, Hashable] = {
                key: ("push", self.epoch, self.versions.get(key, 0), tick) for key in keys
            }
        else:
            by_key = dict.fromkeys(keys, ("poll", self.epoch, tick))
        self._read_keys[keys] = (state, by_key)
        return by_key

    def waiter(self, keys: tuple[AudienceKey, ...], read_ahead: ReadAhead | None) -> asyncio.Future[Started | None]:
        """A future resolved when one of ``keys`` changes — with ``read_ahead``'s read (if any),
        once it is done — or the listener's health changes; ``forget`` it when done with it. A
        future per waiting stream, no task and no coroutine: an idle stream costs next to
        nothing here, and a thousand woken at once cost a thousand callbacks."""
        woken: asyncio.Future[Started | None] = asyncio.get_running_loop().create_future()
        for key in keys or (HEALTH,):  # a health change wakes every key: it need not be watched as well
            self._waiters.setdefault(key, set()).add(woken)
        if read_ahead is not None:
            self._read_aheads[woken] = read_ahead
        return woken

    def forget(self, woken: asyncio.Future[Started | None], keys: tuple[AudienceKey, ...]) -> None:
        self._read_aheads.pop(woken, None)
        for key in keys or (HEALTH,):
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(woken)
                if not waiting:
                    del self._waiters[key]

    def end_streams(self) -> None:
        self.ending = True
        self._wake_all()

    def _wake_all(self) -> None:
        for key in list(self._waiters):
            self._wake(key)

    def _wake(self, key: Hashable) -> None:
        for woken in self._waiters.pop(key, ()):
            resolve_waiter(woken)

    def _read_ahead_then_wake(self, key: AudienceKey) -> None:
        """Start each distinct read the watchers of ``key`` will do, and wake each watcher with
        its read when that is done (at once, with none, for a watcher that named none or whose
        read fails to start: it reads for itself)."""
        by_share_key: dict[Hashable, tuple[Callable[[], Started], list[asyncio.Future[Started | None]]]] = {}
        for woken in self._waiters.pop(key, ()):
            read_ahead = self._read_aheads.get(woken)
            if read_ahead is None:
                resolve_waiter(woken)
            else:
                by_share_key.setdefault(read_ahead[0], (read_ahead[1], []))[1].append(woken)
        for start, streams in by_share_key.values():
            token = _for_a_change.set(True)
            try:
                started: Started | None = start()
            except Exception:  # noqa: BLE001 - the streams read for themselves and report it
                started = None
            finally:
                _for_a_change.reset(token)
            if started is None or started[1].done():
                wake_all_with(streams, started)
            else:
                started[1].add_done_callback(
                    lambda _read, streams=streams, started=started: wake_all_with(streams, started)
                )

    # -- the connection's side --------------------------------------------------------------

    def _received(self, delivery: Delivery) -> None:
        what, detail = delivery
        if what == "following":  # followed now: read what came before
            self.followed.add(detail)
            self._changed(detail)
        elif what == "advanced":  # a channel moved: keep what was told of it, read it
            channel, message = detail
            if audience_key(channel) in self._key_watchers or audience_key(channel) in self._unwatched_since:
                self.tails.told(channel, message)
            self._changed(channel)
        elif "leading" in detail:
            self._detector_heard_at = time.monotonic()
        elif "released" in detail and self.detector is not None:
            self.detector.nudge()

    def _changed(self, channel: str) -> None:
        kind, value = audience_key(channel)
        if not kind:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for key in ((kind, value), (kind, ANY)):
            if key not in self._pending:
                self._pending.add(key)
                # At the earliest on the loop's next turn: changes received together wake once.
                loop.call_at(self._windows.fire_at(key, now), self._wake_key, key)

    def _wake_key(self, key: AudienceKey) -> None:
        self._pending.discard(key)
        self._windows.fired(key, asyncio.get_running_loop().time())
        self.versions[key] = self.versions.get(key, 0) + 1
        self.generation += 1
        self._read_ahead_then_wake(key)

    def _set_healthy(self, healthy: bool, error: BaseException | str | None = None) -> None:
        if healthy == self.healthy and error is None:
            return
        if not healthy and error is not None and not self._outage_reported:
            log_server_error("streams:listen", error, fallback="polling")
            self._outage_reported = True
        if healthy:
            self._outage_reported = False
        if healthy != self.healthy:
            self.healthy = healthy
            self.tails.clear()  # told over a subscription that is gone or new: what came between was not
            self.epoch += 1
            self.generation += 1
            self._wake_all()

    def _lingered(self) -> bool:
        return self._watchers == 0 and self._idle_since is not None and time.monotonic() - self._idle_since > LINGER_S

    async def _run(self) -> None:
        attempt = 0
        detecting: asyncio.Task[None] | None = None
        try:
            while not self._lingered():
                try:
                    bus = await change_bus()
                    if bus is None:  # only Upstash's REST URL: no push, by choice (``bus``)
                        self._set_healthy(False)
                        await asyncio.sleep(RECONNECT_BACKOFF_S[-1])
                        continue
                    if detecting is None or detecting.done():
                        self.detector = ChangeDetector(bus)
                        detecting = asyncio.get_running_loop().create_task(
                            self.detector.run(lambda: not self._lingered()), name="ermis-change-detector"
                        )
                    await self._subscribe(bus)
                    attempt = 0
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # noqa: BLE001 - any failure means: poll, report once, retry
                    self._set_healthy(False, error)
                    await asyncio.sleep(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])
                    attempt += 1
            self._set_healthy(False)
        finally:
            if detecting is not None:
                detecting.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await detecting

    async def _subscribe(self, bus: ChangeBus) -> None:
        async with bus.subscription() as subscription:
            self._subscription = subscription
            for key in [*self._key_watchers, *self._unwatched_since]:
                subscription.follow(channel_name(key))
            self._detector_heard_at = time.monotonic()  # a detector, ours if none other, leads within the limit
            self._set_healthy(True)
            try:
                async for delivery in subscription:
                    if delivery is not None:
                        self._received(delivery)
                    elif self._lingered():
                        return
                    self._unfollow_lingered()
                    self._judge_detector()
            finally:
                self._subscription = None
                self.followed.clear()
                self.tails.clear()

    def _judge_detector(self) -> None:
        silent_s = time.monotonic() - self._detector_heard_at
        if silent_s <= silence_limit_s():
            self._set_healthy(True)
        else:  # subscribed, but nobody positions: poll (each read positions first)
            self._set_healthy(False, f"no change detector heard for {silent_s:.0f} s")


def resolve_waiter(woken: asyncio.Future[Started | None], started: Started | None = None) -> None:
    """Wake one waiter (``ChangeListener.waiter``), with ``started`` — its read — if any."""
    if not woken.done():
        woken.set_result(started)


def wake_all_with(streams: list[asyncio.Future[Started | None]], started: Started | None) -> None:
    for woken in streams:
        resolve_waiter(woken, started)


_listeners: dict[asyncio.AbstractEventLoop, ChangeListener] = {}


def change_listener() -> ChangeListener:
    loop = asyncio.get_running_loop()
    listener = _listeners.get(loop)
    if listener is None:
        listener = _listeners[loop] = ChangeListener()
    return listener


def end_streams() -> None:
    """End every stream of this loop at its next wait: the server is stopping."""
    listener = _listeners.get(asyncio.get_running_loop())
    if listener is not None:
        listener.end_streams()


async def positioned_before_read() -> None:
    """Every row committed before now has its position: for a read that cannot count on the
    detector — the REST snapshot (no stream may be open anywhere, so no detector), a stream's
    first read, every read while push is down. What it positions is published like the
    detector's advances."""
    bus = await change_bus()
    await positioned_now(lambda advanced: publish_advanced(bus, advanced))


async def stop_change_listener() -> None:
    """Stop this loop's listener and its detector (releasing the lease), and close its bus: the
    server as it stops, tests. (Otherwise the listener lingers out by itself.)"""
    listener = _listeners.pop(asyncio.get_running_loop(), None)
    if listener is not None and listener._task is not None:
        listener._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await listener._task
    await close_change_bus()
