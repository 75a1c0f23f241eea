"""The dev cron scheduler: ``vercel.json``'s crons, fired on their real schedules.

Vercel invokes each cron path with ``GET`` and ``Authorization: Bearer $CRON_SECRET`` at the
times its five-field expression names, in UTC. This scheduler does the same against the dev
server. Its clock is injectable: ``SimulatedClock(start)`` runs from any instant at real speed,
so a daily 03:00 job can be watched firing without waiting for 03:00.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import httpx
from croniter import croniter

from lib.jobs.schedule import CronEntry

Clock = Callable[[], datetime]


def fires_between(entries: list[CronEntry], after: datetime, until: datetime) -> list[tuple[datetime, CronEntry]]:
    """Every (time, cron) with ``after < time <= until``, in time order."""
    due: list[tuple[datetime, CronEntry]] = []
    for entry in entries:
        moments = croniter(entry.schedule, after)
        while (moment := moments.get_next(datetime)) <= until:
            due.append((moment, entry))
    return sorted(due, key=lambda item: item[0])


def system_clock() -> datetime:
    return datetime.now(UTC)


class SimulatedClock:
    """Starts at ``start`` and advances at real speed."""

    def __init__(self, start: datetime) -> None:
        self.start = start.astimezone(UTC)
        self.origin = time.monotonic()

    def __call__(self) -> datetime:
        elapsed = time.monotonic() - self.origin
        return datetime.fromtimestamp(self.start.timestamp() + elapsed, UTC)


class CronScheduler:
    def __init__(
        self,
        entries: list[CronEntry],
        fire: Callable[[CronEntry, datetime], Awaitable[None]],
        clock: Clock = system_clock,
        tick_seconds: float = 0.5,
    ) -> None:
        self.entries = entries
        self.fire = fire
        self.clock = clock
        self.tick_seconds = tick_seconds
        self._in_flight: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        last = self.clock()
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.tick_seconds)
            except TimeoutError:
                pass
            now = self.clock()
            for moment, entry in fires_between(self.entries, last, now):
                # Each job runs on its own, like separate Vercel invocations.
                task = asyncio.get_running_loop().create_task(self.fire(entry, moment))
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)
            last = now


async def invoke_cron(base_url: str, entry: CronEntry, cron_secret: str | None) -> httpx.Response:
    """Call one cron as Vercel does: ``GET`` with the cron bearer."""
    headers = {"Authorization": f"Bearer {cron_secret}"} if cron_secret else {}
    async with httpx.AsyncClient(base_url=base_url, timeout=310.0) as client:
        return await client.get(entry.path, headers=headers)
