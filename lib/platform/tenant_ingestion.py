"""Tenant ingestion (spec: ``ingestAllTenantScopedFeeds``): every completed newsroom tenant
scope refreshed once per tick, serially, under a time budget.

- Scopes come from ``list_configured_newsroom_tenant_scope_ids`` (``[]`` when unavailable).
- The sweep starts at ``floor(started_at_ms / 600000) % len(scopes)`` and wraps around, so
  when the budget cuts a tick short, the next tick starts further along and the tail of a long
  list is never starved.
- Each scope: ``list_aggregated_stories(scope, force_refresh=True, bootstrap_refresh='never')``.
  Catalog builds are shared by source set + locale (and throttled), so tenants on one catalog
  cost one build per tick.
- Before each scope the elapsed time is checked against ``ERMIS_TENANT_INGESTION_TIME_BUDGET_MS``
  and the tick's ``deadline``; scopes not reached are counted in ``skippedTimeBudget`` (not
  retried this tick). A scope still refreshing when the deadline comes is cut off and counted
  there too: the tick must answer before its function's ``maxDuration``.
- A failing scope is counted in ``failed`` with a stderr line naming it; the rest go on.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from lib.clock import Deadline
from lib.platform.aggregation.sources import list_configured_newsroom_tenant_scope_ids
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.settings import get_settings

ROTATION_WINDOW_MS = 10 * 60_000


def rotation_offset(started_at_ms: int, scope_count: int) -> int:
    return (started_at_ms // ROTATION_WINDOW_MS) % scope_count if scope_count else 0


async def ingest_all_tenant_scoped_feeds(started_at_ms: int, deadline: Deadline | None = None) -> dict[str, Any]:
    began = time.monotonic()
    budget = Deadline(began + get_settings().ermis_tenant_ingestion_time_budget_ms / 1000)
    if deadline is not None and deadline.at < budget.at:
        budget = deadline
    scopes = await list_configured_newsroom_tenant_scope_ids()
    offset = rotation_offset(started_at_ms, len(scopes))
    ordered = scopes[offset:] + scopes[:offset]
    result = {"tenantScopes": len(scopes), "refreshed": 0, "failed": 0, "skippedTimeBudget": 0, "elapsedMs": 0}
    for index, scope in enumerate(ordered):
        if budget.passed():
            result["skippedTimeBudget"] = len(ordered) - index
            break
        try:
            async with asyncio.timeout(budget.remaining()):
                await list_aggregated_stories(scope, force_refresh=True, bootstrap_refresh="never")
            result["refreshed"] += 1
        except TimeoutError:
            result["skippedTimeBudget"] = len(ordered) - index
            sys.stderr.write(f"[tenant-ingestion] time budget ran out while refreshing {scope}\n")
            break
        except Exception as error:  # noqa: BLE001 - one tenant never stops the others
            result["failed"] += 1
            sys.stderr.write(f"[tenant-ingestion] refresh failed for {scope}: {error}\n")
    result["elapsedMs"] = round((time.monotonic() - began) * 1000)
    return result
