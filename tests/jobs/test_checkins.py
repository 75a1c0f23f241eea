"""lib.jobs.checkins: each cron GET checks in to Sentry (in_progress, then ok or error) with
the monitor slug and schedule from vercel.json; operator POSTs do not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lib.db.pool import close_pools
from lib.jobs.schedule import load_crons
from lib.local.paths import PROJECT_ROOT
from lib.local.routing import discover_routes, resolve
from tests.support.auth import cron_headers, session_headers
from tests.support.functions import client_for, load_api_app
from tests.support.sentry import sentry_sink

PATH = "/api/admin/state/cleanup"


def check_ins(items: list[dict]) -> list[dict]:
    return [item for item in items if "monitor_slug" in item]


async def test_a_successful_run_checks_in_progress_then_ok(db, set_env, mint_token: Callable[..., str]) -> None:
    app = load_api_app("api/admin/state/cleanup.py")
    with sentry_sink() as sink:
        set_env(SENTRY_DSN=sink.dsn)
        async with client_for(app) as client:
            assert (await client.get(PATH, headers=cron_headers())).status_code == 200
            operator = session_headers(mint_token(platform_role="ops"))
            assert (await client.post(PATH, headers=operator)).status_code == 200
        started, finished = check_ins(sink.items())
    assert (started["monitor_slug"], started["status"]) == ("state-cleanup", "in_progress")
    assert started["monitor_config"]["schedule"] == {"type": "crontab", "value": "0 3 * * *"}
    assert (finished["status"], finished["check_in_id"]) == ("ok", started["check_in_id"])
    assert finished["duration"] >= 0


async def test_a_failing_run_checks_in_error(db, set_env) -> None:
    app = load_api_app("api/admin/state/cleanup.py")
    with sentry_sink() as sink:
        await close_pools()
        set_env(
            SENTRY_DSN=sink.dsn, DATABASE_URL="postgresql://nobody@127.0.0.1:1/none", ERMIS_DB_CONNECT_TIMEOUT_S="1"
        )
        async with client_for(app) as client:
            assert (await client.get(PATH, headers=cron_headers())).status_code == 500
        await close_pools()
        statuses = [item["status"] for item in check_ins(sink.items())]
    assert statuses == ["in_progress", "error"]


@pytest.mark.parametrize("cron", load_crons(), ids=lambda cron: cron.name)
async def test_every_cron_checks_in_under_its_name_and_schedule(cron, db, redis, set_env) -> None:
    route, _ = resolve(discover_routes(PROJECT_ROOT), cron.path)
    app = load_api_app(route.file)
    with sentry_sink() as sink:
        set_env(SENTRY_DSN=sink.dsn)
        async with client_for(app) as client:
            await client.get(cron.path, headers=cron_headers())
        started, finished = check_ins(sink.items())
    assert started["monitor_slug"] == finished["monitor_slug"] == cron.name
    assert started["monitor_config"]["schedule"]["value"] == cron.schedule
    assert finished["status"] in ("ok", "error")
