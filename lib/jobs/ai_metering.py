"""``/api/admin/ai/metering/flush``: drain the AI metering outbox to Polar (spec:
``flushAiMeteringOutbox``).

Model: ``ai_usage_metering_outbox`` holds one Polar event per new ledger row. A flush claims up
to ``ERMIS_METERING_BATCH_SIZE`` eligible rows (``pending``, or ``failed`` with
``attempt_count < MAX_AI_METERING_ATTEMPTS``) with ``FOR UPDATE SKIP LOCKED``, sends them in one
``events.ingest`` request, and marks them ``processed`` or ``failed`` in the same transaction
before claiming again. So:

- one Polar request at a time (no stampede on the provider's rate limits);
- two flushes at once never send the same row (the second skips locked rows);
- a crash re-delivers at most the batch in flight, and every event carries ``external_id`` =
  ``ermis-ai-usage-<row id>``, so Polar drops the re-delivered duplicates.

Failures: a 4xx for a batch means some event is bad, so its rows are retried one by one to
fail only the bad ones; a 5xx, a 429 or a network error fails the whole batch (each row
``attempt_count + 1``, ``last_error`` kept). At 5 attempts a row stops being eligible.

Returns ``{processed, failed, skipped, reason}``. ``skipped`` counts eligible rows this run did
not send: beyond ``limit``, or held by a concurrent flush. No ``POLAR_ACCESS_TOKEN``: zeroes and
``reason: "polar_not_configured"``; the ``aiUsageMetering`` flag off: zeroes and
``reason: "metering_disabled"`` (rows wait, nothing is lost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lib.db.pool import connection
from lib.jobs.cron_auth import report_cron_drain_failures
from lib.lazy_imports import lazy_import
from lib.observability import describe_error
from lib.platform.flags import is_feature_enabled
from lib.settings import get_settings, secret_or_none

if TYPE_CHECKING:
    from polar import PolarError
    from polar.v2026_10 import PolarAsync
    from psycopg import AsyncConnection

ai_usage = lazy_import("lib.platform.ai_usage")
polar_sdk = lazy_import("polar")
polar_base = lazy_import("polar.base")
polar_api = lazy_import("polar.v2026_10")

ROUTE = "/api/admin/ai/metering/flush"
MONITOR = "ai-metering-flush"
EXTERNAL_ID_PREFIX = "ermis-ai-usage-"
POLAR_TIMEOUT_SECONDS = 15.0
BATCHES_PER_RUN = 10
_ELIGIBLE = "(status = 'pending' OR (status = 'failed' AND attempt_count < %(max_attempts)s))"


def polar_client() -> PolarAsync | None:
    settings = get_settings()
    token = secret_or_none(settings.polar_access_token)
    if token is None:
        return None
    return polar_api.PolarAsync(token, base_url=settings.polar_server_url or None, timeout=POLAR_TIMEOUT_SECONDS)


def external_id(row_id: int) -> str:
    return f"{EXTERNAL_ID_PREFIX}{row_id}"


async def _send(polar: PolarAsync, rows: list[dict[str, Any]]) -> None:
    await polar.events.ingest(events=[{**row["event"], "external_id": external_id(row["id"])} for row in rows])


def _is_rejection(error: PolarError) -> bool:
    """A 4xx that blames the events (not a rate limit): retrying the same bytes cannot help."""
    return isinstance(error, polar_sdk.PolarClientError) and not isinstance(error, polar_base.PolarRateLimitError)


async def _mark(conn: AsyncConnection, processed: list[int], failed: dict[int, str]) -> None:
    if processed:
        await conn.execute(
            "UPDATE ai_usage_metering_outbox SET status = 'processed', processed_at = now(), last_error = NULL"
            " WHERE id = ANY(%s)",
            (processed,),
        )
    for row_id, error in failed.items():
        await conn.execute(
            "UPDATE ai_usage_metering_outbox SET status = 'failed', attempt_count = attempt_count + 1,"
            " last_error = %s, last_attempt_at = now() WHERE id = %s",
            (error[:2000], row_id),
        )


async def _deliver(polar: PolarAsync, rows: list[dict[str, Any]]) -> tuple[list[int], dict[int, str]]:
    """Send a batch; returns (processed ids, failed id → error)."""
    try:
        await _send(polar, rows)
        return [row["id"] for row in rows], {}
    except polar_sdk.PolarError as error:
        if not _is_rejection(error) or len(rows) == 1:
            return [], {row["id"]: describe_error(error) for row in rows}
    processed: list[int] = []
    failed: dict[int, str] = {}
    for row in rows:
        done, errors = await _deliver(polar, [row])
        processed += done
        failed |= errors
    return processed, failed


async def flush_ai_metering_outbox(limit: int = 100) -> dict[str, Any]:
    result: dict[str, Any] = {"processed": 0, "failed": 0, "skipped": 0, "reason": None}
    polar = polar_client()
    if polar is None:
        result["reason"] = "polar_not_configured"
        return result
    if not await is_feature_enabled("aiUsageMetering"):
        result["reason"] = "metering_disabled"
        return result
    async with polar:
        await _drain(polar, limit, result)
    report_cron_drain_failures(MONITOR, result["failed"])
    return result


async def _drain(polar: PolarAsync, limit: int, result: dict[str, Any]) -> None:
    batch_size = get_settings().ermis_metering_batch_size
    params = {"max_attempts": ai_usage.MAX_AI_METERING_ATTEMPTS}
    attempted: list[int] = []
    while len(attempted) < limit:
        async with connection() as conn, conn.transaction():
            cursor = await conn.execute(
                f"SELECT id, event FROM ai_usage_metering_outbox WHERE {_ELIGIBLE}"
                " AND NOT (id = ANY(%(attempted)s))"
                " ORDER BY id LIMIT %(size)s FOR UPDATE SKIP LOCKED",
                {**params, "attempted": attempted, "size": min(batch_size, limit - len(attempted))},
            )
            rows = await cursor.fetchall()
            if not rows:
                break
            processed, failed = await _deliver(polar, rows)
            await _mark(conn, processed, failed)
        attempted += [row["id"] for row in rows]
        result["processed"] += len(processed)
        result["failed"] += len(failed)

    async with connection() as conn:
        cursor = await conn.execute(
            f"SELECT count(*) AS waiting FROM ai_usage_metering_outbox WHERE {_ELIGIBLE}"
            " AND NOT (id = ANY(%(attempted)s))",
            {**params, "attempted": attempted},
        )
        result["skipped"] = (await cursor.fetchone())["waiting"]


async def flush_ai_metering_outbox_per_run() -> dict[str, Any]:
    """What the cron drains per tick: ``BATCHES_PER_RUN`` batches' worth when batching,
    the spec's 100 rows when sending row at a time."""
    return await flush_ai_metering_outbox(limit=max(100, BATCHES_PER_RUN * get_settings().ermis_metering_batch_size))
