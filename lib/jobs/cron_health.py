"""Cron health (issue 11): each job's recent runs, its last success, and whether it is stale.

A job is **stale** when its last success is older than twice its interval — the gap between two
consecutive fire times of its ``vercel.json`` schedule, from ``croniter`` (``*/10`` → 10 minutes,
stale after 20; ``0 3 * * *`` → a day, stale after two). A job that has never succeeded is
measured from the oldest run on record of any job (when this deployment's history starts), so a
job that never fires at all is flagged too, while a fresh database flags nothing.

The **watchdog** (``report_stale_crons``, run after the five-minute ledger redrive cron by
``with_stale_cron_watchdog``, which adds ``staleCrons`` to that cron's answer) reports
each stale job through ``log_server_error`` — stderr and Sentry — once per episode: an episode
is identified by the last success it follows, remembered in ``cron_stale_reports`` with one
conditional upsert, so concurrent watchdogs report it once and a job that recovers and stalls
again is reported again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.jobs.run_leases import LEASE_SECONDS
from lib.jobs.schedule import CronEntry, load_crons
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error

croniter = lazy_import("croniter")

RUNS_PER_JOB = 20
STALE_INTERVALS = 2


def schedule_interval(schedule: str, at: datetime) -> timedelta:
    """The gap between the next two fire times after ``at``."""
    fires = croniter.croniter(schedule, at)
    first = fires.get_next(datetime)
    return fires.get_next(datetime) - first


@dataclass(frozen=True)
class JobHealth:
    entry: CronEntry
    stale: bool
    last_success_at: datetime | None
    runs: list[dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.entry.name,
            "path": self.entry.path,
            "schedule": self.entry.schedule,
            "stale": self.stale,
            "lastSuccessAt": iso_timestamp(self.last_success_at) if self.last_success_at else None,
            "runs": self.runs,
        }


_READ = """
SELECT j.job, last_success.started_at AS last_success_at, recent.*
FROM unnest(%(jobs)s::text[]) AS j(job)
LEFT JOIN LATERAL (
    SELECT started_at FROM cron_runs
    WHERE job = j.job AND status = 'succeeded' ORDER BY started_at DESC LIMIT 1
) last_success ON true
LEFT JOIN LATERAL (
    SELECT id, trigger, started_at, finished_at, status, duration_ms, http_status, summary, error
    FROM cron_runs WHERE job = j.job ORDER BY started_at DESC, id DESC LIMIT %(runs)s
) recent ON true
"""


def _run_json(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    status = row["status"]
    if status == "running" and row["started_at"] < now - timedelta(seconds=LEASE_SECONDS):
        status = "lost"  # its instance died: the lease lapsed and no answer was recorded
    return {
        "id": row["id"],
        "trigger": row["trigger"],
        "startedAt": iso_timestamp(row["started_at"]),
        "finishedAt": iso_timestamp(row["finished_at"]) if row["finished_at"] else None,
        "status": status,
        "durationMs": row["duration_ms"],
        "httpStatus": row["http_status"],
        "summary": row["summary"],
        "error": row["error"],
    }


async def read_cron_health(entries: list[CronEntry] | None = None) -> list[JobHealth]:
    entries = load_crons() if entries is None else entries
    async with connection() as conn:
        rows = await (
            await conn.execute(_READ, {"jobs": [entry.name for entry in entries], "runs": RUNS_PER_JOB})
        ).fetchall()
        clock = await (
            await conn.execute("SELECT now() AS now, (SELECT min(started_at) FROM cron_runs) AS history_starts")
        ).fetchone()
    now, history_starts = clock["now"], clock["history_starts"]
    by_job: dict[str, list[dict[str, Any]]] = {}
    last_success: dict[str, datetime | None] = {}
    for row in rows:
        last_success[row["job"]] = row["last_success_at"]
        if row["id"] is not None:
            by_job.setdefault(row["job"], []).append(_run_json(row, now))
    health = []
    for entry in entries:
        succeeded = last_success.get(entry.name)
        since = succeeded or history_starts
        allowed = STALE_INTERVALS * schedule_interval(entry.schedule, now)
        stale = since is not None and now - since > allowed
        health.append(JobHealth(entry, stale, succeeded, by_job.get(entry.name, [])))
    return health


_REMEMBER_EPISODE = (
    "INSERT INTO cron_stale_reports (job, last_success_at) VALUES (%s, %s)"
    " ON CONFLICT (job) DO UPDATE SET last_success_at = EXCLUDED.last_success_at, reported_at = now()"
    " WHERE cron_stale_reports.last_success_at IS DISTINCT FROM EXCLUDED.last_success_at"
    " RETURNING job"
)


async def report_stale_crons() -> list[str]:
    """Report each stale job once per episode; returns the names of the jobs stale now."""
    stale = [job for job in await read_cron_health() if job.stale]
    async with connection() as conn:
        for job in stale:
            episode = await (await conn.execute(_REMEMBER_EPISODE, (job.entry.name, job.last_success_at))).fetchone()
            if episode is None:
                continue
            last = iso_timestamp(job.last_success_at) if job.last_success_at else "never"
            log_server_error(
                "cron-watchdog",
                f"cron {job.entry.name} is stale: last success {last}, scheduled {job.entry.schedule}",
                job=job.entry.name,
                lastSuccessAt=last,
            )
    return [job.entry.name for job in stale]


def with_stale_cron_watchdog(job: Callable[[], Awaitable[dict[str, Any]]]) -> Callable[[], Awaitable[dict[str, Any]]]:
    """``job``, then the watchdog; its answer gains ``staleCrons`` (``null`` when the watchdog
    could not run — the job's own result stands either way)."""

    async def run() -> dict[str, Any]:
        result = await job()
        try:
            result["staleCrons"] = await report_stale_crons()
        except Exception as error:  # noqa: BLE001 - the host job's answer must not depend on it
            log_server_error("cron-watchdog", error)
            result["staleCrons"] = None
        return result

    return run
