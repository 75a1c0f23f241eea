"""Cron history and health through the real cron routes: every invocation recorded (scheduled,
operator, duplicate), a 500's cause kept, staleness from vercel.json's schedules, the watchdog
reporting one stale episode once (to a loopback Sentry), /api/admin/crons, and retention."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from lib.clock import utc_now
from lib.jobs.cron_health import read_cron_health, schedule_interval
from lib.jobs.run_leases import take_run_lease
from lib.jobs.state_cleanup import cleanup_platform_state
from tests.support.auth import cron_headers, session_headers
from tests.support.functions import client_for, load_api_app
from tests.support.sentry import sentry_sink

CLEANUP = load_api_app("api/admin/state/cleanup.py")
LEDGER = load_api_app("api/admin/ai/ledger/retry/flush.py")
CRONS = load_api_app("api/admin/crons.py")
CLEANUP_PATH = "/api/admin/state/cleanup"
LEDGER_PATH = "/api/admin/ai/ledger/retry/flush"


async def runs(db, job: str) -> list[dict]:
    cursor = await db.execute(
        "SELECT trigger, status, http_status, summary, error, duration_ms FROM cron_runs WHERE job = %s ORDER BY id",
        (job,),
    )
    columns = [column.name for column in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in await cursor.fetchall()]


@pytest.mark.parametrize(
    ("schedule", "interval"),
    [("*/10 * * * *", timedelta(minutes=10)), ("*/5 * * * *", timedelta(minutes=5)), ("0 3 * * *", timedelta(days=1))],
)
def test_the_interval_comes_from_the_schedule(schedule: str, interval: timedelta) -> None:
    assert schedule_interval(schedule, utc_now()) == interval


async def test_every_invocation_is_recorded_with_its_counters(db, redis, mint_token: Callable[..., str]) -> None:
    async with client_for(CLEANUP) as client:
        assert (await client.get(CLEANUP_PATH, headers=cron_headers())).status_code == 200
        operator = session_headers(mint_token(platform_role="ops"))
        assert (await client.post(CLEANUP_PATH, headers=operator)).status_code == 200
        held = await take_run_lease("state-cleanup", "schedule")  # a run going on elsewhere
        assert (await client.get(CLEANUP_PATH, headers=cron_headers())).json()["skipped"] == "already_running"
    assert held is not None
    recorded = await runs(db, "state-cleanup")
    assert [(run["trigger"], run["status"], run["http_status"]) for run in recorded] == [
        ("schedule", "succeeded", 200),
        ("operator", "succeeded", 200),
        ("schedule", "skipped", 200),
    ]
    summary = recorded[0]["summary"]
    assert summary["deleted"] == 0 and "deletedCronRuns" in summary and "processedAt" in summary
    assert recorded[0]["duration_ms"] >= 0 and recorded[0]["error"] is None


async def test_a_cron_answering_500_shows_its_error(db, redis) -> None:
    await db.execute("ALTER TABLE platform_state_hash RENAME TO platform_state_hash_moved")
    try:
        async with client_for(CLEANUP) as client:
            response = await client.get(CLEANUP_PATH, headers=cron_headers())
    finally:
        await db.execute("ALTER TABLE platform_state_hash_moved RENAME TO platform_state_hash")
    assert response.status_code == 500
    assert "platform_state_hash" not in response.text  # the client sees the generic message
    [run] = await runs(db, "state-cleanup")
    assert (run["status"], run["http_status"], run["summary"]) == ("failed", 500, None)
    assert "UndefinedTable" in run["error"] and "platform_state_hash" in run["error"]


async def test_a_cron_that_stops_running_is_stale_and_reported_once(db, redis, set_env) -> None:
    async with client_for(CLEANUP) as client, client_for(LEDGER) as ledger:
        assert (await client.get(CLEANUP_PATH, headers=cron_headers())).status_code == 200
        assert (await ledger.get(LEDGER_PATH, headers=cron_headers())).json()["staleCrons"] == []
    health = {job.entry.name: job for job in await read_cron_health()}
    assert not any(job.stale for job in health.values())

    # Three days pass with no cleanup run (daily: stale after two days) while the ledger cron,
    # every five minutes, keeps running — and so does its watchdog.
    await db.execute("UPDATE cron_runs SET started_at = started_at - interval '3 days' WHERE job = 'state-cleanup'")
    with sentry_sink() as sink:
        set_env(SENTRY_DSN=sink.dsn)
        async with client_for(LEDGER) as client:
            answers = [(await client.get(LEDGER_PATH, headers=cron_headers())).json() for _ in range(3)]
        events = [item for item in sink.items() if "cron state-cleanup is stale" in str(item.get("message", ""))]
    # Every job with no success since the history began three days ago is stale (the others
    # never ran here); the ledger cron keeps succeeding.
    assert "state-cleanup" in answers[0]["staleCrons"] and "ai-ledger-retry-flush" not in answers[0]["staleCrons"]
    assert answers[1]["staleCrons"] == answers[0]["staleCrons"]
    assert len(events) == 1  # one episode, one report, however many ticks see it

    async with client_for(CLEANUP) as client:  # it recovers ...
        assert (await client.get(CLEANUP_PATH, headers=cron_headers())).status_code == 200
    assert not {job.entry.name: job for job in await read_cron_health()}["state-cleanup"].stale
    await db.execute("UPDATE cron_runs SET started_at = started_at - interval '3 days' WHERE job = 'state-cleanup'")
    with sentry_sink() as sink:  # ... and stalls again: a new episode, reported again
        set_env(SENTRY_DSN=sink.dsn)
        async with client_for(LEDGER) as client:
            await client.get(LEDGER_PATH, headers=cron_headers())
        events = [item for item in sink.items() if "cron state-cleanup is stale" in str(item.get("message", ""))]
    assert len(events) == 1


async def test_the_crons_route_lists_every_job_with_its_runs(db, redis, mint_token: Callable[..., str]) -> None:
    async with client_for(CLEANUP) as client:
        await client.get(CLEANUP_PATH, headers=cron_headers())
    async with client_for(CRONS) as client:
        assert (await client.get("/api/admin/crons")).status_code == 401
        for role in ("billing", "compliance"):
            forbidden = await client.get("/api/admin/crons", headers=session_headers(mint_token(platform_role=role)))
            assert forbidden.status_code == 403
        body = (await client.get("/api/admin/crons", headers=session_headers(mint_token(platform_role="ops")))).json()
    jobs = {job["name"]: job for job in body["jobs"]}
    assert len(jobs) == 5
    cleanup = jobs["state-cleanup"]
    assert (cleanup["path"], cleanup["schedule"], cleanup["stale"]) == (CLEANUP_PATH, "0 3 * * *", False)
    assert cleanup["lastSuccessAt"] == cleanup["runs"][0]["startedAt"]
    assert cleanup["runs"][0]["status"] == "succeeded" and cleanup["runs"][0]["summary"]["deleted"] == 0
    assert jobs["rss-refresh"]["runs"] == [] and jobs["rss-refresh"]["lastSuccessAt"] is None


async def test_runs_older_than_30_days_are_pruned_in_batches(db) -> None:
    await db.execute(
        "INSERT INTO cron_runs (job, trigger, status, started_at)"
        " SELECT 'state-cleanup', 'schedule', 'succeeded', now() - interval '31 days' FROM generate_series(1, 7)"
    )
    await db.execute(
        "INSERT INTO cron_runs (job, trigger, status, started_at) VALUES ('x', 'schedule', 'running', now())"
    )
    assert (await cleanup_platform_state(batch_size=3))["deletedCronRuns"] == 7
    assert (await (await db.execute("SELECT count(*) FROM cron_runs")).fetchone())[0] == 1
