"""The listener: which audiences changed, told by Postgres, and who is waiting for them (issue 13).

A change flows one way through ``lib/streams``: a row is written → its table's triggers log it
in the stream log (``lib.platform.activity``) and ``pg_notify('ermis_changes', '<kind>|<value>')``
— which audience changed, never the row: ``alerts|<tenant>``, ``deliveries|<tenant>`` (failed
ones only), ``review|<tenant>``, ``drafts|<tenant>``, ``user|<user id>`` → **this module** bumps
that audience's version and starts the read each waiting stream will need → ``watch`` hands the
read to the stream waiting on it → the stream turns what was read into frames (``notifications``,
``feed``, ``story``) → ``sse`` writes them.

The model:

- **One listening connection per process** (per event loop), opened by the first stream and
  closed ``LINGER_S`` after the last one leaves: ``LISTEN ermis_changes`` on
  ``ERMIS_DATABASE_LISTEN_URL`` (a direct connection, where ``DATABASE_URL`` goes through a
  transaction pooler that cannot LISTEN), else ``DATABASE_URL``. It proves itself with a probe
  (a ``NOTIFY`` to itself that must come back) before it is trusted.
- **An audience key** is ``(kind, value)`` — a notification's payload, and the stream log's
  channel names (``audience_key``); a stream waits on the keys its reads depend on (a
  platform-wide reader waits on ``(kind, "*")``, woken by every value of that kind). Keys carry
  the authorization of the reads that follow: a notification for tenant B can only wake keys of
  tenant B, and what a woken stream sends is still decided by its read.
- **Coalescing**: a key that changed gets a new *version* and its waiters wake at once — at
  most once per ``COALESCE_S`` (25 ms) per key: the first notification after a quiet window
  wakes immediately, later ones within the window are gathered into one wake at its end.
  Streams key their shared reads by those versions, so a burst costs one read per audience per
  window, and a lone change waits for nothing.
- **Read ahead**: a change starts the *reads* first, then wakes the streams. A waiting stream
  names its read (a share key — its audience — and how to start its shared read); the listener
  starts each distinct one once and wakes its streams when it is done, handing them the read.
  Woken first, a thousand streams would each take a turn before the one query they wait for was
  even sent, and another to pick up its result — most of a burst's latency, measured.
- **Shutdown**: ``end_streams()`` (called by the server as it stops) ends every stream of the
  process at its next wait, with a clean end of body, so the browsers reconnect elsewhere.
- **Health**: when the listener cannot connect, fails its probe, or its connection drops
  (``pg_terminate_backend``, a Postgres restart), it is *unhealthy*: the outage is reported
  once through ``log_server_error``, streams poll (``watch``), and the listener reconnects with
  backoff. Every change of health wakes every waiter and starts a new *epoch* of read keys: the
  changes made meanwhile were not notified, so every stream reads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from lib.lazy_imports import lazy_import
from lib.observability import log_server_error
from lib.settings import get_settings, secret_or_none

psycopg = lazy_import("psycopg")

CHANNEL = "ermis_changes"
LISTENER_APPLICATION_NAME = "ermis-change-listener"  # how an operator finds the connection
COALESCE_S = 0.025
PROBE_TIMEOUT_S = 2.0
LINGER_S = 30.0
RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
ANY = "*"
HEALTH = ("listener", "health")  # what a stream that waits on no key (polling) waits on

AudienceKey = tuple[str, str]
Started = tuple[Hashable, asyncio.Future[Any]]  # a read and the read key it was started under
ReadAhead = tuple[Hashable, Callable[[], Started]]  # (share key, start): the read a change makes a stream do


def audience_key(name: str) -> AudienceKey:
    """``'<kind>|<value>'`` — a notification's payload, a stream log channel — as its key."""
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
        self._woken_at: dict[AudienceKey, float] = {}
        self._watchers = 0
        self._task: asyncio.Task[None] | None = None
        self._idle_since: float | None = None
        self._outage_reported = False
        self.ending = False

    # -- the streams' side ------------------------------------------------------------------

    @contextmanager
    def watching(self) -> Iterator[None]:
        self._watchers += 1
        self._idle_since = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ermis-change-listener")
        try:
            yield
        finally:
            self._watchers -= 1
            if self._watchers == 0:
                self._idle_since = time.monotonic()

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
            try:
                started: Started | None = start()
            except Exception:  # noqa: BLE001 - the streams read for themselves and report it
                started = None
            if started is None or started[1].done():
                wake_all_with(streams, started)
            else:
                started[1].add_done_callback(
                    lambda _read, streams=streams, started=started: wake_all_with(streams, started)
                )

    # -- the connection's side --------------------------------------------------------------

    def _received(self, payload: str) -> None:
        kind, value = audience_key(payload)
        if not kind or kind == "probe":
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if len(self._woken_at) > 4096:  # only keys woken within the last window matter
            self._woken_at = {key: at for key, at in self._woken_at.items() if now - at < COALESCE_S}
        for key in ((kind, value), (kind, ANY)):
            if key not in self._pending:
                self._pending.add(key)
                # At the earliest on the loop's next turn: notifications read off the socket together wake once.
                loop.call_at(max(now, self._woken_at.get(key, now - COALESCE_S) + COALESCE_S), self._wake_key, key)

    def _wake_key(self, key: AudienceKey) -> None:
        self._pending.discard(key)
        self._woken_at[key] = asyncio.get_running_loop().time()
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
            self.epoch += 1
            self.generation += 1
            self._wake_all()

    def _lingered(self) -> bool:
        return self._watchers == 0 and self._idle_since is not None and time.monotonic() - self._idle_since > LINGER_S

    async def _run(self) -> None:
        attempt = 0
        while not self._lingered():
            try:
                await self._listen()
                attempt = 0
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - any failure means: poll, report once, retry
                self._set_healthy(False, error)
                await asyncio.sleep(RECONNECT_BACKOFF_S[min(attempt, len(RECONNECT_BACKOFF_S) - 1)])
                attempt += 1
        self._set_healthy(False)

    async def _listen(self) -> None:
        settings = get_settings()
        url = secret_or_none(settings.ermis_database_listen_url) or secret_or_none(settings.database_url)
        if url is None:
            raise RuntimeError("no DATABASE_URL to listen on")
        timeout = max(1, round(settings.db_connect_timeout_s))
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=timeout, application_name=LISTENER_APPLICATION_NAME
        ) as conn:
            await conn.execute(f"LISTEN {CHANNEL}")
            probe = f"probe|{uuid.uuid4()}"
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, probe))
            async for notify in conn.notifies(timeout=PROBE_TIMEOUT_S):
                if notify.payload == probe:
                    break
            else:
                raise RuntimeError("LISTEN receives no notifications on this connection (a transaction pooler?)")
            self._set_healthy(True)
            while not self._lingered():
                async for notify in conn.notifies(timeout=1.0):
                    self._received(notify.payload)


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


async def stop_change_listener() -> None:
    """Stop this loop's listener (tests; the listener otherwise lingers out by itself)."""
    listener = _listeners.pop(asyncio.get_running_loop(), None)
    if listener is not None and listener._task is not None:
        listener._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await listener._task
