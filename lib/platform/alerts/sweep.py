"""The alert sweep (spec: ``evaluateInstantAlertRulesForAllTenants``): every tenant with an
alert-rules row, ``ALERT_SWEEP_CONCURRENCY`` at a time, evaluated against the build-free peek of
its stories. A tenant with no built cache is skipped (``skippedNoFeedCache``) — the sweep never
builds. A tenant with rules but no newsroom profile (so no catalog) is counted in
``skippedNoProfile`` (an added field), not as a failure every tick. One tenant's failure is
counted and written to stderr, and the others go on. Given the
tick's ``deadline``, no batch starts after it, and a batch still running then is cut off: the
tenants not evaluated are counted in ``skippedDeadline`` (an added field).
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

    for start in range(0, len(tenants), ALERT_SWEEP_CONCURRENCY):
        batch = tenants[start : start + ALERT_SWEEP_CONCURRENCY]
        try:
            if deadline is not None and deadline.passed():
                raise TimeoutError
            async with asyncio.timeout(None if deadline is None else deadline.remaining()):
                await asyncio.gather(*(sweep(tenant) for tenant in batch))
        except TimeoutError:
            settled = sum(summary[key] for key in ("evaluated", "skippedNoFeedCache", "skippedNoProfile", "failed"))
            summary["skippedDeadline"] = len(tenants) - settled
            sys.stderr.write(f"[alerts] tick deadline reached; {summary['skippedDeadline']} tenant(s) not evaluated\n")
            break
    return summary
