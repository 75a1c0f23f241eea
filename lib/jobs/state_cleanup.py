"""``/api/admin/state/cleanup``: housekeeping for the Postgres KV store (spec: state cleanup).

Reads already ignore expired rows, but nothing deleted them, so abandoned keys (old feed caches
of several kB each) accumulated. Daily at 03:00 this deletes:

1. ``platform_state`` rows whose ``expires_at`` has passed;
2. ``platform_state_hash`` rows under ``platform:ai-envelope-threshold-firings:`` not updated
   for ``THRESHOLD_FIRING_RETENTION_DAYS`` (90);
3. queue batch claims done more than ``lib.queues.claims.DONE_RETENTION_DAYS`` (8) ago
   (``deletedBatchClaims``, an added field);
4. cron runs older than ``lib.jobs.cron_history.RETENTION_DAYS`` (30) (``deletedCronRuns``);
5. stream positions older than ``lib.platform.activity.RETENTION_DAYS`` (7), raising each
   channel's retention horizon (``deletedStreamChanges``, added by issue 20): a stream resuming
   from before it is told so (``stream.reset``), never served a gap;
6. webhook deliveries delivered or discarded more than
   ``lib.platform.alerts.webhooks.FINISHED_RETENTION_DAYS`` (30) ago, and endpoint circuits
   untouched as long (``deletedWebhookDeliveries``, added by issue 35).

Deletion runs in batches of ``CLEANUP_BATCH_SIZE`` rows, each its own short transaction, so a
backlog of millions never holds one long lock or one huge WAL burst. As the spec says, this
route catches its own errors and answers the typed 500 itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.clock import iso_timestamp
from lib.db.state_store import delete_expired_state_batch, delete_stale_hash_records_batch
from lib.http.errors import internal_error_response
from lib.jobs.cron_history import prune_cron_runs_batch
from lib.platform.activity import prune_stream_changes_batch
from lib.platform.alerts.webhooks import prune_finished_deliveries_batch
from lib.queues.claims import prune_done_claims_batch

ROUTE = "/api/admin/state/cleanup"
CLEANUP_BATCH_SIZE = 5_000
THRESHOLD_FIRING_RETENTION_DAYS = 90
THRESHOLD_FIRING_HASH_PREFIX = "platform:ai-envelope-threshold-firings:"


async def _delete_in_batches(delete_batch: Callable[[int], Awaitable[int]], batch_size: int) -> int:
    deleted = 0
    while True:
        removed = await delete_batch(batch_size)
        deleted += removed
        if removed < batch_size:
            return deleted


async def cleanup_platform_state(batch_size: int = CLEANUP_BATCH_SIZE) -> dict[str, Any]:
    retention = timedelta(days=THRESHOLD_FIRING_RETENTION_DAYS)

    async def delete_stale_firings(size: int) -> int:
        return await delete_stale_hash_records_batch(THRESHOLD_FIRING_HASH_PREFIX, retention, size)

    return {
        "deleted": await _delete_in_batches(delete_expired_state_batch, batch_size),
        "deletedHashRecords": await _delete_in_batches(delete_stale_firings, batch_size),
        "deletedBatchClaims": await _delete_in_batches(prune_done_claims_batch, batch_size),
        "deletedCronRuns": await _delete_in_batches(prune_cron_runs_batch, batch_size),
        "deletedStreamChanges": await _delete_in_batches(prune_stream_changes_batch, batch_size),
        "deletedWebhookDeliveries": await _delete_in_batches(prune_finished_deliveries_batch, batch_size),
        "processedAt": iso_timestamp(),
    }


async def run_state_cleanup(_request: Request) -> Response:
    try:
        return JSONResponse(await cleanup_platform_state())
    except Exception as error:  # noqa: BLE001 - the spec's own try/catch
        return internal_error_response(ROUTE, error)
