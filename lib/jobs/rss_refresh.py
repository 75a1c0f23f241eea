"""``/api/admin/rss/refresh``: the ten-minute tick (spec: the refresh cron and the manual POST).

GET (cron), in the spec's fixed order:

1. ``rssQueuePipeline`` on → publish one ``rss.ingest`` message (the queue pipeline); otherwise,
   or when nothing could be published, refresh the global catalog inline. A publish that
   fails (no signing secret, no queue token, the queue service down) is reported
   (``log_server_error``, so Sentry) and named in the body's ``publishError`` (an added
   field), and the tick goes on inline: one misconfiguration must not stop every tenant;
2. tenant ingestion (``ingest_all_tenant_scoped_feeds``);
3. the alert sweep.

When published, the body also carries the message's ``batchId``.

All of it runs under one deadline, ``TICK_DEADLINE_S`` after the tick starts — the function's
``maxDuration`` less room for the response and the work deferred past it. The global step may
use all but ``SWEEP_RESERVE_S`` of it (cut off: reported, ``globalRefreshError``), tenant
ingestion stops at the same point, and the sweep at the deadline; what was cut is counted in
``skippedTimeBudget`` and ``skippedDeadline``.

POST (operator): step 1 and step 3 — the global catalog, never tenant scopes; its
``tenantIngestion`` is ``null``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from lib.clock import Deadline, iso_timestamp
from lib.observability import describe_error, log_server_error
from lib.platform.aggregation.sources import GLOBAL_SCOPE
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.platform.alerts.sweep import evaluate_instant_alert_rules_for_all_tenants
from lib.platform.flags import is_feature_enabled
from lib.platform.tenant_ingestion import ingest_all_tenant_scoped_feeds
from lib.queues.publish import publish_rss_aggregation_refresh

ROUTE = "/api/admin/rss/refresh"
REFRESH_MAX_DURATION_S = 300  # vercel.json's maxDuration for this function (a test holds them equal)
TICK_DEADLINE_S = REFRESH_MAX_DURATION_S - 30
SWEEP_RESERVE_S = 20


async def _publish_or_refresh_inline() -> dict[str, Any]:
    pipeline_enabled = await is_feature_enabled("rssQueuePipeline")
    batch_id, publish_error = None, None
    if pipeline_enabled:
        try:
            batch_id = await publish_rss_aggregation_refresh()
        except Exception as error:  # noqa: BLE001 - reported; the inline path stays authoritative
            log_server_error(f"{ROUTE}:publish", error)
            publish_error = describe_error(error)
    published = batch_id is not None
    if not published:
        await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    body: dict[str, Any] = {
        "published": published,
        "pipelineEnabled": pipeline_enabled,
        "inlineRefreshed": not published,
    }
    if published:
        body["batchId"] = batch_id  # an added field: lets an operator follow the batch to its consumer
    if publish_error is not None:
        body["publishError"] = publish_error
    return body


async def run_scheduled_refresh() -> dict[str, Any]:
    started_at_ms = int(time.time() * 1000)
    deadline = Deadline.after(TICK_DEADLINE_S)
    before_sweep = deadline.earlier_by(SWEEP_RESERVE_S)
    body = await _global_step_before(before_sweep)
    body["tenantIngestion"] = await ingest_all_tenant_scoped_feeds(started_at_ms, before_sweep)
    body["alertSweep"] = await evaluate_instant_alert_rules_for_all_tenants(deadline)
    body["refreshedAt"] = iso_timestamp()
    return body


async def _global_step_before(deadline: Deadline) -> dict[str, Any]:
    try:
        async with asyncio.timeout(max(0.0, deadline.remaining())):
            return await _publish_or_refresh_inline()
    except TimeoutError:
        message = "the global refresh ran past the tick's deadline"
        log_server_error(f"{ROUTE}:global", message)
        return {
            "published": False,
            "pipelineEnabled": await is_feature_enabled("rssQueuePipeline"),
            "inlineRefreshed": False,
            "globalRefreshError": message,
        }


async def run_manual_refresh() -> dict[str, Any]:
    body = await _publish_or_refresh_inline()
    body["tenantIngestion"] = None
    body["alertSweep"] = await evaluate_instant_alert_rules_for_all_tenants()
    body["refreshedAt"] = iso_timestamp()
    return body
