"""/api/admin/flags and /api/feature-flags: validation, global values and tenant overrides,
and the flags the bundle reads taking effect."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lib.jobs.ai_metering import flush_ai_metering_outbox
from lib.platform.alerts.evaluation import evaluate_alert_rules
from lib.platform.alerts.rules import AlertRule
from lib.platform.flags import FLAG_DEFINITIONS, set_feature_flag
from tests.support.auth import session_headers
from tests.support.functions import client_for, load_api_app

ADMIN = load_api_app("api/admin/flags.py")
MINE = load_api_app("api/feature-flags.py")


def test_five_flags_with_labels_and_descriptions() -> None:
    assert len(FLAG_DEFINITIONS) == 5
    assert FLAG_DEFINITIONS["rssQueuePipeline"].label == "RSS queue pipeline"
    assert FLAG_DEFINITIONS["rssQueuePipeline"].default is False
    assert FLAG_DEFINITIONS["notificationsRestPolling"].description.endswith("clients fall back to a 12s poll.")


async def test_put_sets_global_and_tenant_values(db, mint_token: Callable[..., str]) -> None:
    admin = session_headers(mint_token(platform_role="super_admin"))
    member = session_headers(mint_token(org_id="org_a", org_role="org:member"))
    async with client_for(ADMIN) as admin_client, client_for(MINE) as mine:
        assert (await mine.get("/api/feature-flags", headers=member)).json()["flags"][
            "notificationsRestPolling"
        ] is False
        put = await admin_client.put(
            "/api/admin/flags", headers=admin, json={"key": "notificationsRestPolling", "enabled": True}
        )
        assert put.status_code == 200
        override = {"key": "notificationsRestPolling", "enabled": False, "tenantScopeId": "org_a"}
        assert (await admin_client.put("/api/admin/flags", headers=admin, json=override)).status_code == 200
        assert (await mine.get("/api/feature-flags", headers=member)).json()["flags"][
            "notificationsRestPolling"
        ] is False
        other = session_headers(mint_token(org_id="org_b", org_role="org:member"))
        assert (await mine.get("/api/feature-flags", headers=other)).json()["flags"]["notificationsRestPolling"] is True
        clear = {"key": "notificationsRestPolling", "clearOverride": True, "tenantScopeId": "org_a"}
        assert (await admin_client.put("/api/admin/flags", headers=admin, json=clear)).status_code == 200
        assert (await mine.get("/api/feature-flags", headers=member)).json()["flags"][
            "notificationsRestPolling"
        ] is True
        listed = {
            flag["key"]: flag for flag in (await admin_client.get("/api/admin/flags", headers=admin)).json()["flags"]
        }
        assert (
            listed["notificationsRestPolling"]["enabled"] is True
            and listed["notificationsRestPolling"]["overrides"] == {}
        )


@pytest.mark.parametrize(
    "body",
    [
        {"key": "noSuchFlag", "enabled": True},
        {"key": "rssQueuePipeline", "enabled": "yes"},
        {"key": "rssQueuePipeline", "enabled": True, "clearOverride": True},
        {"key": "rssQueuePipeline"},
        {"key": "rssQueuePipeline", "enabled": True, "tenantScopeId": 7},
        {"key": "rssQueuePipeline", "enabled": True, "surprise": 1},
        ["not", "an", "object"],
    ],
)
async def test_bad_updates_are_400_and_change_nothing(db, body, mint_token: Callable[..., str]) -> None:
    admin = session_headers(mint_token(platform_role="super_admin"))
    async with client_for(ADMIN) as client:
        response = await client.put("/api/admin/flags", headers=admin, json=body)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_flag_update"
        json_headers = {**admin, "content-type": "application/json"}
        malformed = await client.put("/api/admin/flags", headers=json_headers, content=b"{nope")
        assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid_json"
    assert (await (await db.execute("SELECT count(*) FROM feature_flag_values")).fetchone())[0] == 0


async def test_only_super_admin_reaches_the_store(db, mint_token: Callable[..., str]) -> None:
    async with client_for(ADMIN) as client:
        ops = session_headers(mint_token(platform_role="ops"))
        assert (await client.get("/api/admin/flags", headers=ops)).status_code == 403
        assert (
            await client.put("/api/admin/flags", json={"key": "rssQueuePipeline", "enabled": True})
        ).status_code == 401
    async with client_for(MINE) as client:
        assert (await client.get("/api/feature-flags")).status_code == 401


async def test_flags_the_bundle_reads_take_effect(db, set_env) -> None:
    stories = [{"id": "s1", "headline": "Earthquake", "summary": ""}]
    await set_feature_flag("instantAlerts", False, "org_a")
    assert await evaluate_alert_rules("org_a", stories, [AlertRule(id="q", keywords=["earthquake"])]) == 0
    assert await evaluate_alert_rules("org_b", stories, [AlertRule(id="q", keywords=["earthquake"])]) == 1
    await set_feature_flag("aiUsageMetering", False)
    set_env(POLAR_ACCESS_TOKEN="token")
    assert (await flush_ai_metering_outbox())["reason"] == "metering_disabled"


async def test_flags_are_read_once_per_invocation(db) -> None:
    from lib.platform.flags import resolve_feature_flags
    from lib.runtime.invocation import _memo

    token = _memo.set({})  # what InvocationMemoMiddleware does for each request
    try:
        first = await resolve_feature_flags("org_a")
        await set_feature_flag("rssQueuePipeline", True)
        assert await resolve_feature_flags("org_a") == first  # same invocation: the memo answers
    finally:
        _memo.reset(token)
    assert (await resolve_feature_flags("org_a"))["rssQueuePipeline"] is True  # a new invocation reads again
