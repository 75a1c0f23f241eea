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
from lib.observability import ensure_sentry

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
    from sentry_sdk.crons import MonitorStatus, capture_checkin

    slug = cron_name(path)
    config = monitor_config(path)
    check_in_id = capture_checkin(monitor_slug=slug, status=MonitorStatus.IN_PROGRESS, monitor_config=config)
    started = time.monotonic()
    status = MonitorStatus.ERROR
    try:
        response = await run()
        if response.status_code < 500:
            status = MonitorStatus.OK
        return response
    finally:
        capture_checkin(
            monitor_slug=slug,
            check_in_id=check_in_id,
            status=status,
            duration=time.monotonic() - started,
            monitor_config=config,
        )
