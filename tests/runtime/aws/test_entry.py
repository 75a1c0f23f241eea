"""lib.runtime.aws.entry, called as the Lambda runtime calls it (the sync handler, on a thread of
its own): an API Gateway v2 event reaches the story route with its path parameter through Mangum,
and an EventBridge Scheduler invocation runs the state cleanup against real Postgres — and
refuses to run without CRON_SECRET."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lib.runtime.aws.scheduler import ScheduledRunFailed
from tests.runtime.aws.test_http import http_api_v2_event
from tests.support.auth import session_headers
from tests.support.aws import invoke_lambda
from tests.support.catalogs import add_draft


async def test_an_api_gateway_event_reaches_the_story_route_with_its_path_parameter(
    db, set_env, mint_token: Callable[..., str]
) -> None:
    await add_draft(db, "org_a", "s-42", phase="clustered")
    event = http_api_v2_event(
        "/api/stories/s-42", "GET", session_headers(mint_token(org_id="org_a", org_role="org:member"))
    )
    event |= {"routeKey": "ANY /api/stories/{storyId}", "pathParameters": {"storyId": "s-42"}}
    answer = await invoke_lambda(set_env, "api/stories/[storyId]/index.py", event)
    assert answer["statusCode"] == 200, answer
    assert '"storyId":"s-42"' in answer["body"].replace(" ", "") and "clustered" in answer["body"]
    missing = await invoke_lambda(
        set_env, "api/stories/[storyId]/index.py", http_api_v2_event("/api/stories/s-42", "GET", {})
    )
    assert missing["statusCode"] == 401


async def test_a_scheduler_invocation_runs_the_state_cleanup(db, set_env) -> None:
    await db.execute(
        "INSERT INTO platform_state (key, value, expires_at) VALUES ('old', '1', now() - interval '1 day')"
    )
    answer = await invoke_lambda(set_env, "api/admin/state/cleanup.py", {"ermisCron": "/api/admin/state/cleanup"})
    assert answer["deleted"] == 1 and "processedAt" in answer
    [run] = await (await db.execute("SELECT job, trigger, status FROM cron_runs")).fetchall()
    assert tuple(run) == ("state-cleanup", "schedule", "succeeded")


async def test_a_scheduler_invocation_without_cron_secret_refuses(db, set_env) -> None:
    set_env(CRON_SECRET=None)
    with pytest.raises(ScheduledRunFailed, match="CRON_SECRET"):
        await invoke_lambda(set_env, "api/admin/state/cleanup.py", {"ermisCron": "/api/admin/state/cleanup"})
    assert (await (await db.execute("SELECT count(*) FROM cron_runs")).fetchone())[0] == 0
