"""The shape every cron route shares: GET for the platform, POST for an operator.

``cron_job_app(path, surface, run)`` serves ``run`` twice: on GET behind the cron bearer
(Vercel's scheduled call, wrapped in Sentry cron check-ins) and on POST behind a platform
surface (a human with the right role, from a runbook). Either runs only under the job's run
lease (``run_leases``): a duplicate or overlapping call answers 200 ``already_running`` and
does nothing. Every invocation, the duplicate included, is recorded in ``cron_history``.
``run`` answers the response; jobs whose body is plain JSON wrap it with
``guarded_json_job`` (the spec's ``runGuardedCronHandler``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import CRON_BEARER, surface
from lib.clock import iso_timestamp
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.jobs.checkins import with_cron_checkin
from lib.jobs.cron_auth import run_guarded_cron_handler
from lib.jobs.cron_history import Trigger, fail_cron_run, finish_cron_run, record_skipped_run, start_cron_run
from lib.jobs.run_leases import RunningElsewhere, release_run_lease, take_run_lease
from lib.jobs.schedule import cron_name
from lib.observability import describe_error

JobRun = Callable[[Request], Awaitable[Response]]


def cron_job_app(path: str, surface_name: str, run: JobRun, operator_run: JobRun | None = None) -> Starlette:
    """``operator_run`` serves the POST when it differs from the scheduled run (the refresh)."""
    job = cron_name(path)

    async def leased(trigger: Trigger, job_run: JobRun, request: Request) -> Response:
        lease = await take_run_lease(job, trigger)
        if isinstance(lease, RunningElsewhere):
            await record_skipped_run(job, trigger, iso_timestamp(lease.started_at))
            return lease.response()
        # No lease means the database could not be asked: the run meets that outage and reports
        # it once; a history row cannot be written either.
        run_id = await start_cron_run(job, trigger) if lease is not None else None
        started = time.monotonic()
        try:
            response = await job_run(request)
        except Exception as error:
            await fail_cron_run(run_id, started, describe_error(error))
            raise
        finally:
            if lease is not None:
                await release_run_lease(lease)
        await finish_cron_run(run_id, started, response)
        return response

    async def scheduled_run(request: Request) -> Response:
        return await with_cron_checkin(path, lambda: leased("schedule", run, request))

    async def operator_request(request: Request) -> Response:
        return await leased("operator", operator_run or run, request)

    return function_app(
        route(path, GET=guarded(CRON_BEARER, scheduled_run), POST=guarded(surface(surface_name), operator_request))
    )


def guarded_json_job(context: str, job: Callable[[], Awaitable[dict[str, Any]]]) -> JobRun:
    async def run(_request: Request) -> Response:
        async def respond() -> Response:
            return JSONResponse(await job())

        return await run_guarded_cron_handler(context, respond)

    return run
