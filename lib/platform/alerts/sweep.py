"""The alert sweep (spec: ``evaluateInstantAlertRulesForAllTenants``): every tenant with an
alert-rules row, ``ALERT_SWEEP_CONCURRENCY`` at a time (a pool: a tenant whose receivers are
slow holds one slot and delays no one else), evaluated against the build-free peek of
its stories. A tenant with no built cache is skipped (``skippedNoFeedCache``) — the sweep never
builds. A tenant with rules but no newsroom profile (so no catalog) is counted in
``skippedNoProfile`` (an added field), not as a failure every tick. One tenant's failure is
counted and written to stderr, and the others go on. Given the
tick's ``deadline``, no tenant starts after it, and those still running then are cut off: the
tenants not evaluated are counted in ``skippedDeadline`` (an added field). Then, time allowing,
the webhook backstop wakes the deliveries whose wake-up was lost (``webhookRetriesWoken``, an
added field; ``lib.platform.alerts.webhooks``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from lib.clock import Deadline
from lib.db.state_store import list_state_keys_by_prefix
from lib.lazy_imports import lazy_import
from lib.platform.aggregation.sources import UnknownScope
from lib.platform.aggregation.stories import peek_tenant_scoped_aggregated_stories
from lib.platform.alerts.evaluation import evaluate_alert_rules
from lib.platform.alerts.webhooks import wake_overdue_deliveries

alert_rules = lazy_import("lib.platform.alerts.rules")

ALERT_SWEEP_CONCURRENCY = 5


async def evaluate_instant_alert_rules_for_all_tenants(deadline: Deadline | None = None) -> dict[str, Any]:
    tenants = [
        key.removeprefix(alert_rules.ALERT_RULES_PREFIX)
        for key in await list_state_keys_by_prefix(alert_rules.ALERT_RULES_PREFIX)
    ]
    summary = {"tenantsWithRules": len(tenants), "evaluated": 0, "skippedNoFeedCache": 0, "failed": 0}
    summary["skippedNoProfile"] = summary["skippedDeadline"] = 0

    async def sweep(tenant: str) -> None:
        try:
            stories = await peek_tenant_scoped_aggregated_stories(tenant)
            if stories is None:
                summary["skippedNoFeedCache"] += 1
                return
            await evaluate_alert_rules(tenant, stories)
            summary["evaluated"] += 1
        except UnknownScope:
            summary["skippedNoProfile"] += 1
        except Exception as error:  # noqa: BLE001 - isolate the tenant, as the spec does
            summary["failed"] += 1
            sys.stderr.write(f"[alerts] sweep evaluation failed for {tenant}: {error}\n")

    # A pool, not batches: a tenant whose receivers are slow holds one slot, never a batch.
    slots = asyncio.Semaphore(ALERT_SWEEP_CONCURRENCY)

    async def sweep_in_slot(tenant: str) -> None:
        async with slots:
            if deadline is None or not deadline.passed():
                await sweep(tenant)

    try:
        async with asyncio.timeout(None if deadline is None else deadline.remaining()):
            await asyncio.gather(*(sweep_in_slot(tenant) for tenant in tenants))
    except TimeoutError:
        pass
    settled = sum(summary[key] for key in ("evaluated", "skippedNoFeedCache", "skippedNoProfile", "failed"))
    summary["skippedDeadline"] = len(tenants) - settled
    if summary["skippedDeadline"]:
        sys.stderr.write(f"[alerts] tick deadline reached; {summary['skippedDeadline']} tenant(s) not evaluated\n")
    if deadline is None or not deadline.passed():
        summary["webhookRetriesWoken"] = await wake_overdue_deliveries()
    return summary
