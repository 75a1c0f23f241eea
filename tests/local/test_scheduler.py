"""lib.local.scheduler: real cron expressions, a fake clock, and the firing loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from lib.jobs.schedule import CronEntry, find_cron, load_crons
from lib.local.paths import PROJECT_ROOT
from lib.local.scheduler import CronScheduler, SimulatedClock, fires_between

CLEANUP = CronEntry("/api/admin/state/cleanup", "0 3 * * *")
PURGE = CronEntry("/api/admin/erasure/purge", "30 3 * * *")
FLUSH = CronEntry("/api/admin/ai/metering/flush", "*/5 * * * *")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_daily_jobs_fire_once_at_their_minute() -> None:
    due = fires_between([CLEANUP, PURGE], at("2026-01-01T00:00:00"), at("2026-01-02T00:00:00"))
    assert [(moment.isoformat(), entry.name) for moment, entry in due] == [
        ("2026-01-01T03:00:00+00:00", "state-cleanup"),
        ("2026-01-01T03:30:00+00:00", "erasure-purge"),
    ]


def test_window_bounds_are_exclusive_then_inclusive() -> None:
    assert fires_between([CLEANUP], at("2026-01-01T03:00:00"), at("2026-01-01T03:10:00")) == []
    assert len(fires_between([CLEANUP], at("2026-01-01T02:59:59"), at("2026-01-01T03:00:00"))) == 1


def test_every_five_minutes_over_an_hour() -> None:
    assert len(fires_between([FLUSH], at("2026-01-01T10:00:00"), at("2026-01-01T11:00:00"))) == 12


def test_vercel_json_crons_load_with_names() -> None:
    crons = load_crons(PROJECT_ROOT)
    assert find_cron(crons, "state-cleanup") == CLEANUP
    assert find_cron(crons, "/api/admin/erasure/purge") == PURGE
    assert find_cron(crons, "nope") is None


def test_simulated_clock_starts_where_told_and_moves() -> None:
    clock = SimulatedClock(at("2026-01-01T02:59:59"))
    first = clock()
    assert at("2026-01-01T02:59:59") <= first < at("2026-01-01T03:00:00")
    assert clock() >= first


async def test_scheduler_fires_due_jobs_by_its_clock() -> None:
    now = [at("2026-01-01T02:59:59")]
    fired: list[tuple[str, datetime]] = []

    async def fire(entry: CronEntry, moment: datetime) -> None:
        fired.append((entry.name, moment))

    scheduler = CronScheduler([CLEANUP, PURGE], fire, clock=lambda: now[0], tick_seconds=0.01)
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    await asyncio.sleep(0.05)
    assert fired == []
    now[0] += timedelta(minutes=31)
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert fired == [("state-cleanup", at("2026-01-01T03:00:00")), ("erasure-purge", at("2026-01-01T03:30:00"))]
