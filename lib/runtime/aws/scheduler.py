"""A cron job run by EventBridge Scheduler.

The template gives each ``vercel.json`` cron an EventBridge Scheduler schedule (same expression,
UTC) whose target is the cron's own Lambda, invoked directly with ``{"ermisCron": "<path>"}``.
Authentication is the invocation itself: the function has no public trigger for this (only the
scheduler's role may invoke it), so nothing on the internet can start a run — and, inside, the run
still goes through the job's scheduled ``GET`` with the ``CRON_SECRET`` bearer, so the same gate,
run lease, history and Sentry check-ins apply, and a function without ``CRON_SECRET`` refuses
(fail closed) instead of running unauthenticated. (The other option, the scheduler calling the
function's public URL with the bearer, would need the secret stored in the schedule and a public
endpoint; the direct invocation needs neither.)

A run that is refused or answers 500 raises, so the invocation fails and the scheduler's retry
policy and metrics see it.
"""

from __future__ import annotations

from typing import Any

import httpx
from starlette.types import ASGIApp

from lib.settings import get_settings, secret_or_none


class ScheduledRunFailed(RuntimeError):
    pass


async def run_scheduled_cron(app: ASGIApp, path: str) -> dict[str, Any]:
    """The job's answer (its JSON body) for one scheduled run of ``path``."""
    secret = secret_or_none(get_settings().cron_secret) or ""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://scheduler.invalid") as client:
        response = await client.get(path, headers={"authorization": f"Bearer {secret}"})
    if response.status_code == 401:
        raise ScheduledRunFailed(f"{path}: the cron bearer was refused (is CRON_SECRET set?)")
    if response.status_code >= 500:
        raise ScheduledRunFailed(f"{path}: answered {response.status_code}")
    return response.json()
