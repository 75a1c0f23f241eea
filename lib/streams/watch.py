"""The watch: one stream's wait for its next read, and the loop every stream runs on it.

A stream waits on the audience keys its reads depend on (``listener``) and on its own timers:

- **Push**: a change of one of its keys wakes it with the read the listener started ahead for
  its audience.
- **Safety net**: while push is healthy, a stream also reads every ``ERMIS_SSE_SAFETY_POLL_S``
  (60 s), so nothing is ever missed. Ticks (these, and the polls without push) are aligned to
  the clock, offset by a hash of the stream's first key — its primary audience, the tenant:
  every stream whose reads can be shared ticks with the others and shares them, and a
  process's tenants do not all read in the same instant (10,000 streams at the top of every
  minute).
- **Polling**: while the listener is unhealthy, at the stream's spec interval.
- **Keep-alive**: the wait also returns ``KEEP_ALIVE`` every ``PING_SECONDS``; the stream sends
  a ``: ping`` comment, so proxies never see a silent connection and a gone client is noticed
  — the wait is the stream's only timer.
- **The self-close**: each stream has its spec interval and maximum duration
  (``stream_timing``; ``ERMIS_SSE_POLL_INTERVAL_MS`` and ``ERMIS_SSE_MAX_DURATION_S`` override
  them all). The self-close is a deadline, never overrun: no read starts after it and a read
  still running at it is abandoned (``read_before`` raises ``StreamDeadlineReached``), so a
  stream ends by its self-close however slow the database is — within ``maxDuration``.

A read that fails is reported (``log_server_error``) and made again after the stream's poll
interval, push or not: the change it was woken for is still unsent, and the next change or tick
may be a minute away. ``reads`` and ``read_now`` are the only two ways a stream gets a result.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
import zlib
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from lib.clock import Deadline
from lib.observability import log_server_error
from lib.settings import get_settings
from lib.streams.listener import AudienceKey, ReadAhead, Started, change_listener, resolve_waiter
from lib.streams.shared_reads import Loader, SharedReads

PING_SECONDS = 15
KEEP_ALIVE = ("keep-alive",)  # what next_read_before returns when the stream should send a ping
TIMER_SLACK_S = 0.005  # a stream's timer is moved only when its time moves by more than this
_NO_CONTEXT = contextvars.Context()  # timers that read no context variable need no copy of it
_SKIPPED = object()  # a read that failed (reported) or was abandoned at the self-close

T = TypeVar("T")
StartRead = Callable[[], asyncio.Future[T]]  # starts (or joins) a stream's shared read, not awaited


@dataclass(frozen=True)
class StreamTiming:
    poll_interval_s: float
    max_duration_s: float

    def deadline(self) -> Deadline:
        """When a stream opened now closes itself."""
        return Deadline.after(self.max_duration_s)


def stream_timing(default_poll_ms: int, default_max_s: float) -> StreamTiming:
    settings = get_settings()
    poll_ms = settings.ermis_sse_poll_interval_ms or default_poll_ms
    return StreamTiming(poll_ms / 1000, settings.ermis_sse_max_duration_s or default_max_s)


class StreamDeadlineReached(Exception):
    """The stream's self-close came while it was reading: close now."""


async def read_before(deadline: Deadline, read: asyncio.Future[T]) -> T:
    """The result of a shared read (``SharedReads.start``), or ``StreamDeadlineReached`` when the
    deadline comes first — the read is abandoned, never cancelled: other streams share it."""
    if read.done():  # shared and done: most streams of a change, woken after its read (read ahead)
        return read.result()
    try:
        async with asyncio.timeout(deadline.remaining()):
            return await asyncio.shield(read)
    except TimeoutError:
        if deadline.passed():
            raise StreamDeadlineReached from None
        raise


def tick_phase(keys: tuple[AudienceKey, ...]) -> float:
    """Where in each interval the ticks of a stream watching ``keys`` fall, as a fraction of it."""
    return zlib.crc32(repr(keys[0]).encode()) / 2**32 if keys else 0.0


def _tick(phase: float, interval_s: float) -> int:
    return math.floor(time.time() / interval_s - phase)


class ChangeWatch:
    """One stream's view: the audience keys its reads depend on, the key of its next shared
    read, and the wait for it — a change of those keys (push), or the next aligned tick: the
    safety-net interval while push is healthy, the stream's poll interval while it is not.
    ``reads`` is the loop every stream runs on it."""

    def __init__(self, timing: StreamTiming, keys: tuple[AudienceKey, ...]) -> None:
        self.timing, self.keys = timing, keys
        self.listener = change_listener()
        self._last: Hashable | None = None
        self._keep_alive_at = time.monotonic() + PING_SECONDS
        self._phase = tick_phase(keys)
        self._read_ahead: ReadAhead | None = None
        self._start_read: StartRead[Any] | None = None
        self._woken: asyncio.Future[Started | None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.opened_at = time.monotonic()  # the connection was accepted just before the watch is made
        self._read_started = False

    @contextmanager
    def open(self) -> Iterator[ChangeWatch]:
        with self.listener.watching(self.keys):
            try:
                yield self
            finally:
                if self._timer is not None:
                    self._timer.cancel()
                # The read-ahead holds a bound method of this watch, and the stream's read a
                # closure over it: cycles that only the collector frees, and with everything the
                # stream held (its audience, cursor, slot) they piled up per ended connection
                # until a full pass. Dropped here, the stream's objects go when it does.
                self._read_ahead = self._start_read = self._woken = self._timer = None

    def _start_ahead(self) -> Started:
        assert self._start_read is not None  # set before any wait that names it
        return self.current_key(), self._start_read()

    def _wake_at(self, at: float) -> None:
        """The stream's one timer, moved only when its time moves: a pushed wake leaves it set,
        so a change costs no new timer (and no new objects for the collector to scan) per stream."""
        if self._timer is not None and abs(self._timer.when() - at) < TIMER_SLACK_S:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(at, self._time_up, context=_NO_CONTEXT)

    def _time_up(self) -> None:
        self._timer = None
        if self._woken is not None:
            resolve_waiter(self._woken)

    def _interval_s(self) -> float:
        return get_settings().ermis_sse_safety_poll_s if self.listener.healthy else self.timing.poll_interval_s

    def share_window_s(self) -> float:
        """How long a shared read stays reusable: 7/8 of the interval (without push the poll's —
        the spec's 3.5 s under 4 s —, with it the safety net's, as its ticks are as far apart);
        reads are keyed by tick and version too, so a new tick or a change always reads afresh."""
        return self._interval_s() * 0.875

    def read_keys(self) -> dict[AudienceKey, Hashable]:
        """What a read that depends on each of the stream's keys alone is shared under now: a
        change of its other keys does not make it stale (an alert does not re-read the user's
        notifications)."""
        return self.listener.read_keys(self.keys, _tick(self._phase, self._interval_s()))

    def current_key(self) -> tuple[Hashable, ...]:
        """What a read of all the stream's keys is shared under now: ``("push", ...)`` or
        ``("poll", ...)`` and the read key of each."""
        return ("push" if self.listener.healthy else "poll", *self.read_keys().values())

    def fresh_since(self) -> float | None:
        """For the stream's first read, when the stream opened: no read started before it may
        answer it (``SharedReads``: what this process heard may be stale); ``None`` after."""
        if self._read_started:
            return None
        self._read_started = True
        return self.opened_at

    def start_shared(self, reads: SharedReads, key: Hashable, loader: Loader) -> asyncio.Future[Any]:
        """This stream's read of ``key`` through ``reads``: shared under the stream's current
        read key, for its sharing window (its first read: with reads started since it opened)."""
        return reads.start(key, loader, self.share_window_s(), self.current_key(), self.fresh_since())

    def read_key(self) -> Hashable:
        """What this moment's read is shared under, remembered as the last one read."""
        self._last = self.current_key()
        return self._last

    async def next_read_before(
        self, deadline: Deadline, share_key: Hashable, start_read: StartRead[T]
    ) -> asyncio.Future[T] | tuple[str] | None:
        """Wait for a reason to read again — a change of the keys (push), the health of the
        listener changing, or the next aligned tick — and return the read to await: started by
        ``start_read`` (which shares it under ``current_key()``), or, after a change, the one the
        listener started ahead for every stream of ``share_key``. ``KEEP_ALIVE`` when a ping is
        due first; ``None`` when the deadline (the stream's self-close) comes. Before any read
        (no ``read_key()`` yet) there is nothing to wait for: the first call returns at once."""

        if start_read is not self._start_read:  # made once per stream, not per wait
            self._start_read, self._read_ahead = start_read, (share_key, self._start_ahead)
        loop = asyncio.get_running_loop()
        while True:
            if (key := self.current_key()) != self._last:
                self._last = key
                return start_read()
            if deadline.passed() or self.listener.ending:
                return None
            if (until_keep_alive := self._keep_alive_at - time.monotonic()) <= 0:
                self._keep_alive_at = time.monotonic() + PING_SECONDS
                return KEEP_ALIVE
            interval = self._interval_s()
            until_tick = (_tick(self._phase, interval) + 1 + self._phase) * interval - time.time()
            keys = self.keys if self.listener.healthy else ()
            self._wake_at(loop.time() + max(0.0, min(until_tick, until_keep_alive, deadline.remaining())))
            self._woken = woken = self.listener.waiter(keys, self._read_ahead)
            try:
                started = await woken
            finally:
                self.listener.forget(woken, keys)
            if started is not None and started[0] != self._last:
                # The change's read; a later change (its key newer than this one) reads again.
                self._last = started[0]
                return started[1]

    async def reads(
        self, deadline: Deadline, share_key: Hashable, start_read: StartRead[T], report_as: str, **context: Any
    ) -> AsyncIterator[T | tuple[str]]:
        """The stream's reads as they come (``next_read_before``), watching (``open``) until it
        is closed: each one's result, and ``KEEP_ALIVE`` when a ping is due. Ends at the
        deadline — a read still running then is abandoned — or when the server stops. A read
        that fails is reported (``report_as``, with ``context``) and made again after the poll
        interval."""
        with self.open():
            while (read := await self.next_read_before(deadline, share_key, start_read)) is not None:
                if read is KEEP_ALIVE:
                    yield KEEP_ALIVE
                    continue
                result = await _result_before(deadline, read, report_as, context)
                if result is not _SKIPPED:
                    yield result
                elif deadline.passed():
                    return
                else:  # what it was to send is still unsent: read again soon, not at the next change
                    self._last = None
                    await asyncio.sleep(min(self.timing.poll_interval_s, PING_SECONDS, deadline.remaining()))

    async def read_now(self, deadline: Deadline, start_read: StartRead[T], report_as: str, **context: Any) -> T | None:
        """A read the stream makes without waiting (its next page, its own cursor): ``None`` when
        it fails (reported as ``reads`` reports) or the self-close comes first."""
        result = await _result_before(deadline, start_read(), report_as, context)
        return None if result is _SKIPPED else result


async def _result_before(deadline: Deadline, read: asyncio.Future[T], report_as: str, context: dict[str, Any]) -> Any:
    """``read``'s result, or ``_SKIPPED`` when it failed (reported) or the deadline came first."""
    try:
        return await read_before(deadline, read)
    except StreamDeadlineReached:
        return _SKIPPED
    except Exception as error:  # noqa: BLE001 - a failed read is skipped, not fatal
        log_server_error(report_as, error, **context)
        return _SKIPPED
