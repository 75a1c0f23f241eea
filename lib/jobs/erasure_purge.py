"""``/api/admin/erasure/purge``: execute GDPR erasure requests whose grace window has elapsed
(spec: the erasure purge).

Due requests are confirmed one at a time: each confirm is an irreversible multi-table purge
transaction, and running them serially keeps one heavy transaction on the pool at a time. A
``None`` from the confirm means the request stopped being pending between the list and the
confirm (an operator confirmed or cancelled it): not a failure. Failures are escalated through
``report_cron_drain_failures('gdpr-erasure-purge', failed)`` — personal data that should be
gone and is not should page, not wait for tomorrow.
"""

from __future__ import annotations

from typing import Any

from lib.clock import iso_timestamp
from lib.jobs.cron_auth import report_cron_drain_failures
from lib.observability import describe_error
from lib.platform.erasure import confirm_data_erasure_request, list_due_data_erasure_requests

ROUTE = "/api/admin/erasure/purge"
MONITOR = "gdpr-erasure-purge"


async def purge_due_data_erasure_requests() -> dict[str, Any]:
    due = await list_due_data_erasure_requests()
    purged = failed = 0
    results: list[dict[str, Any]] = []
    for request in due:
        try:
            confirmed = await confirm_data_erasure_request(request.id)
        except Exception as error:  # noqa: BLE001 - one request's failure must not stop the others
            failed += 1
            results.append({"id": request.id, "status": "failed", "error": describe_error(error)})
            continue
        if confirmed is None:
            results.append({"id": request.id, "status": "skipped"})
            continue
        if confirmed.status == "failed":
            failed += 1
            results.append({"id": request.id, "status": "failed", "counts": confirmed.purge_counts,
                            "leftovers": confirmed.leftovers})  # fmt: skip
            continue
        purged += 1
        results.append({"id": request.id, "status": "purged", "counts": confirmed.purge_counts})
    report_cron_drain_failures(MONITOR, failed)
    return {"due": len(due), "purged": purged, "failed": failed, "results": results, "processedAt": iso_timestamp()}
