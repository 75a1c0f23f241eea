"""The change detector: one process of the deployment at a time positions what has committed
and tells every stream process which channels advanced.

- **Candidates.** Every process (event loop) holding streams runs a detector (``listener``
  starts it with its first stream and stops it when the last has lingered out). A candidate
  tries to take the lease (``bus.hold_lease``) every ``RETRY_S``, and at once when the leader
  announces that it let go. On Vercel the detector runs in whichever stream invocation holds
  the lease; on AWS, in one task.
- **The leader** holds one database connection — ``ERMIS_DATABASE_LISTEN_URL`` if set, else
  ``DATABASE_URL``; a transaction pooler is fine, every round is one autocommit statement —
  named ``ermis-change-detector``, and every ``ERMIS_STREAM_DETECT_INTERVAL_MS`` (5 ms; up
  to ten times longer while writers are busy, ``next_round_in``) runs the positioner's rounds
  (``positioner``): rows committed since are positioned and the channels
  that advanced are published on the bus, with their new rows read once and shaped (``tails``:
  the stream processes read them there, not in Postgres); with nothing new a round is one probe of a partial
  index — no lock, no transaction id, nothing to flush. A channel's advances are published at
  most once per window (``coalescing``: at once when quiet, up to 200 ms apart while busy), so
  a busy tenant costs each process that follows it a few messages a second. However many
  processes hold streams,
  Postgres sees this one reader. It renews the lease every third of
  ``ERMIS_STREAM_DETECTOR_LEASE_S`` (3 s).
- **Handover.** A leader that stops cleanly (its streams gone, the server stopping) releases the
  lease and says so: a candidate takes over at once. One killed, frozen or cut off stops
  renewing: a candidate takes over within the lease time and one retry (4 s by default). A
  leader that fails to renew (the lease expired during a pause and another took it; Redis gone)
  stops leading at once. The leader's heartbeat (``leading_message``, at every renewal) tells
  every process's listener that a detector is at work; when none is heard for
  ``silence_limit_s``, their streams poll until one is. Should two ever lead together, their
  rounds still never overlap: the positioner's advisory lock serialises them, so positions stay
  unique and, per channel, in commit order.
- **Failures** (the database, Redis) end the leadership, are reported once per outage
  (``log_server_error``) and retried with backoff. Advances still held in a window are sent as
  the leadership ends; if Redis cannot take them, the other processes' subscriptions broke with
  it, and their streams read everything once it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable

from lib.lazy_imports import lazy_import
from lib.observability import log_server_error
from lib.runtime.process import PROCESS
from lib.settings import get_settings, secret_or_none
from lib.streams.bus import ChangeBus, lease_value
from lib.streams.coalescing import CoalescingWindows
from lib.streams.positioner import Advanced, merged, position_committed
from lib.streams.tails import with_rows, without_rows

psycopg = lazy_import("psycopg")

DETECTOR_APPLICATION_NAME = "ermis-change-detector"  # how an operator finds its connection
RETRY_S = 1.0
COALESCE_S, MAX_COALESCE_S = 0.025, 0.2  # a channel's advances published at most once per window
PUBLISH_WAIT_S = 0.5
STRETCH_MAX = 10.0
ROWS_PER_INTERVAL = 25  # a round that found more rows than this waits proportionally longer
BACKOFF_S = (0.25, 0.5, 1.0, 2.0)  # short: while it is down, the streams of every process wait for it


def next_round_in(interval_s: float, positioned: int) -> float:
    """The wait before the next round: ``interval_s`` while rounds are small (a change reaches
    its streams within it), stretched in step with the rows a round found, up to ten times it,
    while the writers are busy — then per-round costs (the lock, the commit's flush, the probe)
    are paid for many rows at once, and the writers keep their speed."""
    return interval_s * min(STRETCH_MAX, max(1.0, positioned / ROWS_PER_INTERVAL))


def leading_message() -> dict[str, object]:
    """The leader's heartbeat, sent as it takes the lease and at every renewal: the streams of
    every process know a detector is at work, and poll when none has been heard for a while."""
    return {"leading": PROCESS, "at": time.time()}


def silence_limit_s() -> float:
    """How long without a heartbeat before the streams stop counting on a detector: the lease
    expiring and a candidate taking over, and a margin."""
    return get_settings().ermis_stream_detector_lease_s + RETRY_S + 1.0


class ChangeDetector:
    """This event loop's candidacy for the lease, and its leadership while it holds it."""

    def __init__(self, bus: ChangeBus) -> None:
        self.bus = bus
        self.leading_since: float | None = None  # unix time, while this process leads
        self._unsent: Advanced = {}  # advances positioned, not yet published
        self._due: dict[str, float] = {}  # when each unsent channel's advance is published
        self._windows = CoalescingWindows(COALESCE_S, MAX_COALESCE_S)
        self._nudged = asyncio.Event()

    def nudge(self) -> None:
        """The leader let go: try for the lease now."""
        self._nudged.set()

    async def run(self, wanted: Callable[[], bool]) -> None:
        """Be a candidate, and lead when the lease is free, while ``wanted()``."""
        attempt, reported = 0, False
        while wanted():
            self._nudged.clear()
            try:
                led = await self._lead_while(wanted)
                attempt, reported = 0, False
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - any failure: report once, retry after a pause
                if not reported:
                    log_server_error("streams:detector", error)
                    reported = True
                await asyncio.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                continue
            if not led:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._nudged.wait(), RETRY_S)

    async def _lead_while(self, wanted: Callable[[], bool]) -> bool:
        """Lead while ``wanted()`` and the lease stays ours; ``False`` when another holds it."""
        settings = get_settings()
        lease_s, interval_s = settings.ermis_stream_detector_lease_s, settings.ermis_stream_detect_interval_ms / 1000
        value = lease_value(time.time())
        if not await self.bus.hold_lease(value, lease_s):
            return False
        url = secret_or_none(settings.ermis_database_listen_url) or secret_or_none(settings.database_url)
        try:
            if url is None:
                raise RuntimeError("no DATABASE_URL to position the stream log on")
            async with await psycopg.AsyncConnection.connect(
                url,
                autocommit=True,
                connect_timeout=max(1, round(settings.db_connect_timeout_s)),
                application_name=DETECTOR_APPLICATION_NAME,
            ) as conn:
                self.leading_since = time.time()
                await self.bus.publish(leading_message())
                renew_at = time.monotonic() + lease_s / 3
                while wanted():
                    advanced, positioned = await position_committed(conn)
                    now = time.monotonic()
                    for channel in advanced.keys() - self._unsent.keys():
                        self._due[channel] = self._windows.fire_at(channel, now)
                    self._unsent = merged(self._unsent, advanced)
                    due = {channel: self._unsent[channel] for channel, at in self._due.items() if at <= now}
                    if due:
                        told = await with_rows(conn, due, await self.bus.followed(due))
                        await self.bus.publish_advanced(told, PROCESS)
                        for channel in due:
                            del self._due[channel]
                            self._unsent.pop(channel, None)
                            self._windows.fired(channel, now)
                    if time.monotonic() >= renew_at:
                        if not await self.bus.hold_lease(value, lease_s):
                            return True
                        await self.bus.publish(leading_message())
                        renew_at = time.monotonic() + lease_s / 3
                    held_until = min(self._due.values(), default=math.inf) - time.monotonic()
                    await asyncio.sleep(max(0.0, min(next_round_in(interval_s, positioned), held_until)))
        finally:
            self.leading_since = None
            with contextlib.suppress(Exception):
                if self._unsent:  # held in a window, or not taken: the next leader does not know of them
                    await self.bus.publish_advanced(without_rows(self._unsent), PROCESS)
                    self._unsent.clear()
            self._due = dict.fromkeys(self._unsent, 0.0)  # not taken: sent first when this process leads again
            with contextlib.suppress(Exception):
                await self.bus.release_lease(value)
                await self.bus.publish({"released": PROCESS})
        return True


async def publish_advanced(bus: ChangeBus | None, advanced: Advanced) -> None:
    """Tell every stream process that ``advanced`` (positioned outside the detector, by a read);
    best effort, and never for longer than ``PUBLISH_WAIT_S`` (the read waits on it): a stream
    that misses it reads at its next change or tick."""
    if bus is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(bus.publish_advanced(without_rows(advanced), PROCESS), PUBLISH_WAIT_S)
