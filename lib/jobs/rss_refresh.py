"""``/api/admin/rss/refresh``: the ten-minute tick (spec: the refresh cron and the manual POST).

GET (cron), in the spec's fixed order:

1. ``rssQueuePipeline`` on → publish one ``rss.ingest`` message (the queue pipeline); otherwise,
   or when nothing could be published, refresh the global catalog inline;
2. tenant ingestion (``ingest_all_tenant_scoped_feeds``);
3. the alert sweep.

When published, the body also carries the message's ``batchId``.

POST (operator): step 1 and step 3 — the global catalog, never tenant scopes; its
``tenantIngestion`` is ``null``.
"""

from __future__ import annotations

import time
from typing import Any

from lib.clock import iso_timestamp
from lib.platform.aggregation.sources import GLOBAL_SCOPE
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.platform.alerts.sweep import evaluate_instant_alert_rules_for_all_tenants
from lib.platform.flags import is_feature_enabled
from lib.platform.tenant_ingestion import ingest_all_tenant_scoped_feeds
from lib.queues.publish import publish_rss_aggregation_refresh

ROUTE = "/api/admin/rss/refresh"


async def _publish_or_refresh_inline() -> dict[str, Any]:
    pipeline_enabled = await is_feature_enabled("rssQueuePipeline")
    batch_id = await publish_rss_aggregation_refresh() if pipeline_enabled else None
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
    return body


async def run_scheduled_refresh() -> dict[str, Any]:
    started_at_ms = int(time.time() * 1000)
    body = await _publish_or_refresh_inline()
    body["tenantIngestion"] = await ingest_all_tenant_scoped_feeds(started_at_ms)
    body["alertSweep"] = await evaluate_instant_alert_rules_for_all_tenants()
    body["refreshedAt"] = iso_timestamp()
    return body


async def run_manual_refresh() -> dict[str, Any]:
    body = await _publish_or_refresh_inline()
    body["tenantIngestion"] = None
    body["alertSweep"] = await evaluate_instant_alert_rules_for_all_tenants()
    body["refreshedAt"] = iso_timestamp()
    return body
