"""One run of a cron job at a time (issue 10: duplicate and overlapping crons).

Vercel delivers a scheduled invocation at least once, and an operator's POST can land while
the scheduled run is going. Before a run, its job takes a lease in ``cron_run_leases`` with one
statement — granted when no lease exists or the last one lapsed. The run releases it at the
end, matching its holder token; a run that died leaves a lease that lapses after
``LEASE_SECONDS`` (the longest ``maxDuration``). A run that finds the lease held does nothing
and answers 200 ``{"job", "skipped": "already_running", "runningSince", "trigger"}``.

The jobs' own work is claim-based as well (``SKIP LOCKED`` outbox rows, the ledger's
processing list, one transaction per erasure request, the catalog build lock); the lease makes
the whole run single, so a duplicate does not even re-read. If the database cannot be asked,
the run goes ahead and meets the outage itself, as it always did.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from starlette.responses import JSONResponse, Response

from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.observability import log_server_error

LEASE_SECONDS = 300


@dataclass(frozen=True)
class RunLease:
    job: str
    holder: uuid.UUID


@dataclass(frozen=True)
class RunningElsewhere:
    job: str
    trigger: str
    started_at: datetime

    def response(self) -> Response:
        return JSONResponse(
            {
                "job": self.job,
                "skipped": "already_running",
                "runningSince": iso_timestamp(self.started_at),
                "trigger": self.trigger,
            }
        )


_TAKE = (
    "INSERT INTO cron_run_leases (job, holder, trigger, lease_until)"
    " VALUES (%(job)s, %(holder)s, %(trigger)s, now() + make_interval(secs => %(lease)s))"
    " ON CONFLICT (job) DO UPDATE SET holder = EXCLUDED.holder, trigger = EXCLUDED.trigger,"
    " started_at = now(), lease_until = EXCLUDED.lease_until"
    " WHERE cron_run_leases.lease_until < now()"
    " RETURNING job"
)
_TAKE_ATTEMPTS = 3


async def take_run_lease(job: str, trigger: str) -> RunLease | RunningElsewhere | None:
    """The lease, or who holds it; ``None`` when the database cannot be asked."""
    holder = uuid.uuid4()
    try:
        async with connection() as conn:
            for _ in range(_TAKE_ATTEMPTS):
                params = {"job": job, "holder": holder, "trigger": trigger, "lease": LEASE_SECONDS}
                if await (await conn.execute(_TAKE, params)).fetchone() is not None:
                    return RunLease(job, holder)
                held = await (
                    await conn.execute("SELECT trigger, started_at FROM cron_run_leases WHERE job = %s", (job,))
                ).fetchone()
                if held is not None:
                    return RunningElsewhere(job, held["trigger"], held["started_at"])
                # Released between the two statements: try to take it again.
    except Exception:  # noqa: BLE001 - the run meets the outage itself and reports it, once
        return None
    return None


async def release_run_lease(lease: RunLease) -> None:
    try:
        async with connection() as conn:
            await conn.execute("DELETE FROM cron_run_leases WHERE job = %s AND holder = %s", (lease.job, lease.holder))
    except Exception as error:  # noqa: BLE001 - the lease lapses by itself
        log_server_error(f"cron-lease:{lease.job}", error)
