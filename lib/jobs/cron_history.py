"""Cron history (issue 11): every invocation of a cron job is a row in ``cron_runs``.

A run is inserted ``running`` when its job's run lease is granted and finished when its response
is ready: ``succeeded`` (any answer under 500), or ``failed`` with the error message of the
typed 500 — or of a 200 whose body counts items it ``failed`` (a metering row out of attempts,
an erasure whose verification found the person left), which the drain escalated too. A
duplicate that found its job running is recorded ``skipped``. The summary is the response
body's counters: scalars as they are, nested objects of scalars (the refresh's
``tenantIngestion``) kept, lists replaced by their length — so a purge of thousands of requests
stores a number, not the list.

History is for the operators' view: recording is best effort, and a database that cannot take
the row never stops the job (the run lease already decided whether it runs). Rows are kept
``RETENTION_DAYS`` (30) and pruned by the state cleanup cron in bounded batches.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from starlette.responses import Response

from lib.db.pool import connection
from lib.http.errors import REPORTED_ERROR
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error

psycopg_json = lazy_import("psycopg.types.json")

RETENTION_DAYS = 30
ERROR_CHARS = 2000

Trigger = Literal["schedule", "operator"]


async def start_cron_run(job: str, trigger: Trigger) -> int | None:
    """The new run's id, or ``None`` when it could not be recorded."""
    try:
        async with connection() as conn:
            row = await (
                await conn.execute(
                    "INSERT INTO cron_runs (job, trigger, status) VALUES (%s, %s, 'running') RETURNING id",
                    (job, trigger),
                )
            ).fetchone()
            return int(row["id"])
    except Exception as error:  # noqa: BLE001 - history never stops a job
        log_server_error(f"cron-history:{job}", error)
        return None


async def finish_cron_run(run_id: int | None, started: float, response: Response) -> None:
    """``started`` is the ``time.monotonic()`` of the run's start."""
    summary, error = response_summary(response)
    failed_items = (summary or {}).get("failed")
    if isinstance(failed_items, int) and not isinstance(failed_items, bool) and failed_items > 0:
        error = f"{failed_items} failed (the run's summary and the job's own records say which)"
    status = "failed" if response.status_code >= 500 or error else "succeeded"
    await _finish(run_id, started, status, response.status_code, summary, error)


async def fail_cron_run(run_id: int | None, started: float, error: str) -> None:
    """The run raised instead of answering (the platform answers its 500)."""
    await _finish(run_id, started, "failed", 500, None, error)


async def _finish(
    run_id: int | None, started: float, status: str, http_status: int, summary: dict[str, Any] | None, error: str | None
) -> None:
    if run_id is None:
        return
    try:
        async with connection() as conn:
            await conn.execute(
                "UPDATE cron_runs SET status = %s, finished_at = now(), duration_ms = %s, http_status = %s,"
                " summary = %s, error = %s WHERE id = %s",
                (
                    status,
                    round((time.monotonic() - started) * 1000),
                    http_status,
                    psycopg_json.Jsonb(summary) if summary is not None else None,
                    error[:ERROR_CHARS] if error else None,
                    run_id,
                ),
            )
    except Exception as failure:  # noqa: BLE001 - history never stops a job
        log_server_error("cron-history", failure, runId=run_id)


async def record_skipped_run(job: str, trigger: Trigger, running_since: str) -> None:
    try:
        async with connection() as conn:
            await conn.execute(
                "INSERT INTO cron_runs (job, trigger, status, finished_at, duration_ms, http_status, summary)"
                " VALUES (%s, %s, 'skipped', now(), 0, 200, %s)",
                (job, trigger, psycopg_json.Jsonb({"skipped": "already_running", "runningSince": running_since})),
            )
    except Exception as error:  # noqa: BLE001 - history never stops a job
        log_server_error(f"cron-history:{job}", error)


def _counter(value: Any) -> Any:
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict):
        return {key: _counter(item) for key, item in value.items() if not isinstance(item, dict)}
    return value


def response_summary(response: Response) -> tuple[dict[str, Any] | None, str | None]:
    """(the body's counters, the error) of a JSON response. The error of a typed 500 is its
    reported cause (``REPORTED_ERROR``), not the generic message the client saw."""
    try:
        body = json.loads(bytes(response.body))
    except (AttributeError, ValueError):
        return None, None
    if not isinstance(body, dict):
        return None, None
    error = body.get("error")
    if isinstance(error, dict):
        message = getattr(response, REPORTED_ERROR, None) or f"{error.get('code')}: {error.get('message')}"
        return None, message
    return {key: _counter(value) for key, value in body.items()}, None


async def prune_cron_runs_batch(batch_size: int) -> int:
    async with connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM cron_runs WHERE id IN (SELECT id FROM cron_runs"
            " WHERE started_at < now() - make_interval(days => %s) ORDER BY started_at LIMIT %s)",
            (RETENTION_DAYS, batch_size),
        )
        return cursor.rowcount
