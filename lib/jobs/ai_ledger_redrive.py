"""``/api/admin/ai/ledger/retry/flush``: land AI ledger entries that missed Postgres (spec:
``redriveFailedAiLedgerEntries``).

One run:

1. **Reclaim**: everything stranded on the processing list (a redrive that crashed between
   claim and acknowledgement) goes back to the queue. Safe against a concurrent redrive because
   persistence is idempotent on the entry id: reprocessing cannot double-count.
2. **Batches** of ``DEFAULT_REDRIVE_BATCH_SIZE`` (100): claim (``LMOVE`` into processing, in one
   Lua round trip), validate, insert the valid entries into the ledger and the metering outbox
   with one statement, then acknowledge in one script (an entry whose claim an erasure
   rewrote meanwhile is left for the next run: ``lib.platform.ai_ledger_retry``). An entry
   whose insert failed is requeued with ``attempts + 1``; at ``MAX_ATTEMPTS`` (10) it goes to
   the DLQ instead. A malformed entry (not JSON, no ``id``, bad columns) goes straight to the
   DLQ with its reason.
3. A batch whose insert failed because Postgres is unreachable ends the run (the next tick
   retries). Any other database error means one entry is bad: the batch is retried one entry
   at a time so only that entry fails.

Redis round trips: 1 for the reclaim per run, then 2 per batch (claim, acknowledge) — constant
in the batch size. Postgres: 1 transaction per batch (the people's erasure locks, then the
insert: ``lib.platform.ai_usage``).

Dead letters are unrecoverable billable spend, so ``deadLettered`` is escalated through
``report_cron_drain_failures('ai-ledger-redrive', …)``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lib.jobs.cron_auth import report_cron_drain_failures
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error
from lib.platform.ai_ledger_retry import (
    Settled,
    acknowledge,
    claim_batch,
    dead_letter,
    reclaim_stranded,
    retry_entry,
)
from lib.redis.client import REDIS_NOT_CONFIGURED, get_redis

ai_usage = lazy_import("lib.platform.ai_usage")

psycopg = lazy_import("psycopg")
pydantic = lazy_import("pydantic")

if TYPE_CHECKING:
    from lib.platform.ai_usage import AiUsage

    Claimed = list[tuple[int, AiUsage, int]]  # (index in the batch, usage, attempts)

ROUTE = "/api/admin/ai/ledger/retry/flush"
MONITOR = "ai-ledger-redrive"
DEFAULT_REDRIVE_BATCH_SIZE = 100
MAX_ATTEMPTS = 10
MAX_BATCHES_PER_RUN = 50


def parse_entry(raw: str) -> tuple[AiUsage, int]:
    """The usage and its attempt count; ``ValueError`` with a reason when malformed."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
        raise ValueError("no id")
    attempts = data.get("attempts", 0)
    if not isinstance(attempts, int) or attempts < 0:
        raise ValueError("bad attempts")
    try:
        return ai_usage.AiUsage.model_validate(data), attempts
    except pydantic.ValidationError as error:
        fields = ", ".join(str(part) for issue in error.errors() for part in issue["loc"])
        raise ValueError(f"invalid columns: {fields}") from None


async def redrive_failed_ai_ledger_entries(
    batch_size: int = DEFAULT_REDRIVE_BATCH_SIZE, max_batches: int = MAX_BATCHES_PER_RUN
) -> dict[str, Any]:
    result: dict[str, Any] = {"drained": 0, "succeeded": 0, "requeued": 0, "deadLettered": 0, "errors": []}
    client = get_redis()
    if client is None:
        result["errors"].append(REDIS_NOT_CONFIGURED)
        return result

    # Only what is queued now: a requeued entry waits for the next run, not the next batch.
    budget = await reclaim_stranded(client)
    for _ in range(max_batches):
        if budget <= 0:
            break
        claimed = await claim_batch(client, min(batch_size, budget))
        if not claimed:
            break
        budget -= len(claimed)
        result["drained"] += len(claimed)
        settled = [Settled(raw) for raw in claimed]  # landed, unless a step below says otherwise
        valid: Claimed = []
        for index, raw in enumerate(claimed):
            try:
                usage, attempts = parse_entry(raw)
            except ValueError as reason:
                settled[index] = Settled(raw, dead_letter=dead_letter(raw, f"malformed: {reason}"))
                continue
            valid.append((index, usage, attempts))

        failed, database_down = await _persist_isolating_bad_entries(valid, result)
        for index, usage, attempts in failed:
            raw = claimed[index]
            if attempts + 1 >= MAX_ATTEMPTS:
                settled[index] = Settled(raw, dead_letter=dead_letter(raw, f"{MAX_ATTEMPTS} attempts failed"))
            else:
                settled[index] = Settled(raw, requeue=retry_entry(usage.model_dump(mode="json"), attempts + 1))
        result["requeued"] += sum(entry.requeue is not None for entry in settled)
        result["deadLettered"] += sum(entry.dead_letter is not None for entry in settled)
        await acknowledge(client, settled)
        if database_down:
            break

    # One report per run: dead letters page (they are lost spend); otherwise an outage is logged.
    if result["deadLettered"]:
        report_cron_drain_failures(MONITOR, result["deadLettered"])
    elif result["errors"]:
        log_server_error(MONITOR, "; ".join(result["errors"]), drained=result["drained"])
    return result


async def _persist_isolating_bad_entries(valid: Claimed, result: dict[str, Any]) -> tuple[Claimed, bool]:
    """Insert the batch in one statement. Postgres unreachable: every entry failed, and the
    run should stop. Any other database error: one entry is bad, so insert one at a time to
    fail only that one. Returns (failed entries, whether Postgres is down)."""
    try:
        await ai_usage.persist_ai_usage([usage for _, usage, _ in valid])
        result["succeeded"] += len(valid)
        return [], False
    except ai_usage.POSTGRES_UNAVAILABLE as error:
        result["errors"].append(f"ledger insert failed: {type(error).__name__}")
        return list(valid), True
    except psycopg.Error:
        pass
    failed: Claimed = []
    for entry in valid:
        try:
            await ai_usage.persist_ai_usage([entry[1]])
            result["succeeded"] += 1
        except psycopg.Error as error:
            result["errors"].append(f"entry {entry[1].id[:80]} rejected: {type(error).__name__}")
            failed.append(entry)
    return failed, False
