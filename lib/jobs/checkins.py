"""Sentry cron check-ins: each scheduled GET reports ``in_progress``, then ``ok`` or ``error``.

The monitor slug is the job's name (``lib.jobs.schedule``), and the monitor is upserted with the
schedule from ``vercel.json``, so Sentry knows when a run is missed, not only when one fails.
A response of 500 or more (including the typed 500 of a guarded job) checks in as ``error``.
Nothing happens without ``SENTRY_DSN``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response

from lib.jobs.schedule import cron_name, deployed_schedules
from lib.lazy_imports import lazy_import
from lib.observability import ensure_sentry

sentry_crons = lazy_import("sentry_sdk.crons")

MAX_RUNTIME_MINUTES = 5  # Vercel's longest function duration here is 300 s.


def monitor_config(path: str) -> dict[str, Any] | None:
    schedule = deployed_schedules().get(path)
    if schedule is None:
        return None
    return {
        "schedule": {"type": "crontab", "value": schedule},
        "timezone": "UTC",
        "checkin_margin": 1,
        "max_runtime": MAX_RUNTIME_MINUTES,
    }


async def with_cron_checkin(path: str, run: Callable[[], Awaitable[Response]]) -> Response:
    if not ensure_sentry():
        return await run()
    slug = cron_name(path)
    config = monitor_config(path)
    check_in_id = sentry_crons.capture_checkin(
        monitor_slug=slug, status=sentry_crons.MonitorStatus.IN_PROGRESS, monitor_config=config
    )
    started = time.monotonic()
    status = sentry_crons.MonitorStatus.ERROR
    try:
        response = await run()
        if response.status_code < 500:
            status = sentry_crons.MonitorStatus.OK
        return response
    finally:
        sentry_crons.capture_checkin(
            monitor_slug=slug,
            check_in_id=check_in_id,
            status=status,
            duration=time.monotonic() - started,
            monitor_config=config,
        )
