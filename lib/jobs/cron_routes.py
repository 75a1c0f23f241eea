"""The shape every cron route shares: GET for the platform, POST for an operator.

``cron_job_app(path, surface, run)`` serves ``run`` twice: on GET behind the cron bearer
(Vercel's scheduled call, wrapped in Sentry cron check-ins) and on POST behind a platform
surface (a human with the right role, from a runbook). ``run`` answers the response; jobs
whose body is plain JSON wrap it with ``guarded_json_job`` (the spec's
``runGuardedCronHandler``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import CRON_BEARER, surface
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.jobs.checkins import with_cron_checkin
from lib.jobs.cron_auth import run_guarded_cron_handler

JobRun = Callable[[Request], Awaitable[Response]]


def cron_job_app(path: str, surface_name: str, run: JobRun, operator_run: JobRun | None = None) -> Starlette:
    """``operator_run`` serves the POST when it differs from the scheduled run (the refresh)."""

    async def scheduled_run(request: Request) -> Response:
        return await with_cron_checkin(path, lambda: run(request))

    return function_app(
        route(path, GET=guarded(CRON_BEARER, scheduled_run), POST=guarded(surface(surface_name), operator_run or run))
    )


def guarded_json_job(context: str, job: Callable[[], Awaitable[dict[str, Any]]]) -> JobRun:
    async def run(_request: Request) -> Response:
        async def respond() -> Response:
            return JSONResponse(await job())

        return await run_guarded_cron_handler(context, respond)

    return run
