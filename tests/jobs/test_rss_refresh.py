"""/api/admin/rss/refresh end to end: the spec's body, the fixed order (global catalog, tenant
ingestion, alert sweep), alerts for new stories after the response, and the operator POST."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from lib.db.state_store import set_state
from lib.platform.alerts.rules import rules_key
from tests.support.auth import cron_headers, session_headers
from tests.support.catalogs import add_tenant, set_catalog
from tests.support.feeds import FeedServer, rss
from tests.support.functions import client_for, load_api_app
from tests.support.reliability import record

PATH = "/api/admin/rss/refresh"
app = load_api_app("api/admin/rss/refresh.py")


async def seed(db, feed_server: FeedServer) -> None:
    feed_server.feeds["world"] = rss("World", [("Earthquake in Chile", "https://w.example/q", "Big quake.")])
    feed_server.feeds["tech"] = rss("Tech", [("Chip maker unveils processor", "https://t.example/c", "Fast.")])
    await set_catalog(db, "default", [feed_server.url("world")])
    await set_catalog(db, "tech", [feed_server.url("tech")])
    await add_tenant(db, "org_a", "default")
    await add_tenant(db, "org_b", "default")
    await add_tenant(db, "org_c", "tech")
    await set_state(rules_key("org_a"), [{"id": "quake", "keywords": ["earthquake"], "severity": "critical"}])


async def test_the_cron_tick_answers_the_spec_body_and_does_the_work(db, redis, feed_server: FeedServer) -> None:
    await seed(db, feed_server)
    async with client_for(app) as client:
        response = await client.get(PATH, headers=cron_headers())
    assert response.status_code == 200
    body = response.json()
    assert list(body) == [
        "published",
        "pipelineEnabled",
        "inlineRefreshed",
        "tenantIngestion",
        "alertSweep",
        "refreshedAt",
    ]
    assert (body["published"], body["pipelineEnabled"], body["inlineRefreshed"]) == (False, False, True)
    ingestion = body["tenantIngestion"]
    assert set(ingestion) == {"tenantScopes", "refreshed", "failed", "skippedTimeBudget", "elapsedMs"}
    assert (ingestion["tenantScopes"], ingestion["refreshed"], ingestion["failed"]) == (3, 3, 0)
    assert body["alertSweep"] == {
        "tenantsWithRules": 1,
        "evaluated": 1,
        "skippedNoFeedCache": 0,
        "skippedNoProfile": 0,
        "failed": 0,
        "skippedDeadline": 0,
        "webhookRetriesWoken": 0,
    }
    assert body["refreshedAt"].endswith("Z")
    drafts = await (
        await db.execute("SELECT tenant_scope_id, count(*) FROM editorial_story_drafts GROUP BY 1")
    ).fetchall()
    assert dict(drafts) == {"org_a": 1, "org_b": 1, "org_c": 1}
    assert feed_server.fetches["world"] == 1  # global + org_a + org_b share one build
    alerts = await (await db.execute("SELECT tenant_scope_id, severity FROM alert_history")).fetchall()
    assert [tuple(row) for row in alerts] == [("org_a", "critical")]


async def test_with_the_pipeline_on_the_tick_publishes_instead_of_refreshing_inline(
    db, redis, feed_server: FeedServer, set_env, capsys: pytest.CaptureFixture[str]
) -> None:
    load_api_app("api/queues/rss/ingest.py")  # registers the in-process rss.ingest handler
    set_env(ERMIS_QUEUE_SIGNING_SECRET="refresh-test-secret")
    await seed(db, feed_server)
    await db.execute("INSERT INTO feature_flag_values (flag_key, enabled) VALUES ('rssQueuePipeline', true)")
    async with client_for(app) as client:
        body = (await client.get(PATH, headers=cron_headers())).json()
    assert (body["published"], body["pipelineEnabled"], body["inlineRefreshed"]) == (True, True, False)
    assert body["batchId"]
    assert "[queues:rss.ingest] running aggregation refresh batch=" in capsys.readouterr().err
    assert feed_server.fetches["world"] == 1  # the consumer's build, shared with the tenants


@pytest.mark.reliability
async def test_a_failing_publish_is_reported_and_the_tick_goes_on_for_every_tenant(
    db, redis, feed_server: FeedServer, set_env, capsys: pytest.CaptureFixture[str]
) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET=None)
    await seed(db, feed_server)
    await db.execute("INSERT INTO feature_flag_values (flag_key, enabled) VALUES ('rssQueuePipeline', true)")
    async with client_for(app) as client:
        response = await client.get(PATH, headers=cron_headers())
    assert response.status_code == 200
    body = response.json()
    assert (body["published"], body["pipelineEnabled"], body["inlineRefreshed"]) == (False, True, True)
    went_on = body["tenantIngestion"]["refreshed"] == body["tenantIngestion"]["tenantScopes"] > 0
    record("faults", "publishing fails during the tick", injected=1, recovered=int(went_on))
    assert body["publishError"].startswith("SigningSecretMissing")
    assert body["tenantIngestion"]["refreshed"] == body["tenantIngestion"]["tenantScopes"] > 0
    assert "alertSweep" in body
    [reported] = [line for line in capsys.readouterr().err.splitlines() if '"level": "error"' in line]
    assert f"{PATH}:publish" in reported and "SigningSecretMissing" in reported


async def test_operator_post_refreshes_the_global_catalog_only(
    db, redis, feed_server: FeedServer, mint_token: Callable[..., str]
) -> None:
    await seed(db, feed_server)
    async with client_for(app) as client:
        assert (await client.post(PATH)).status_code == 401
        billing = session_headers(mint_token(platform_role="billing"))
        assert (await client.post(PATH, headers=billing)).status_code == 403
        ops = session_headers(mint_token(platform_role="ops"))
        body = (await client.post(PATH, headers=ops)).json()
    assert body["inlineRefreshed"] is True and body["tenantIngestion"] is None
    assert body["alertSweep"]["tenantsWithRules"] == 1
    assert (await (await db.execute("SELECT count(*) FROM editorial_story_drafts")).fetchone())[0] == 0
    assert feed_server.fetches == {"world": 1}


async def test_the_whole_tick_ends_by_its_deadline(
    db, redis, feed_server: FeedServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A global build stuck on a slow feed cannot push tenants and the sweep past maxDuration."""
    from lib.jobs import rss_refresh

    monkeypatch.setattr(rss_refresh, "TICK_DEADLINE_S", 2.0)
    monkeypatch.setattr(rss_refresh, "SWEEP_RESERVE_S", 1.0)
    await seed(db, feed_server)
    feed_server.modes["world"] = "slow"
    started = time.monotonic()
    async with client_for(app) as client:
        response = await client.get(PATH, headers=cron_headers())
    elapsed = time.monotonic() - started
    body = response.json()
    assert response.status_code == 200 and elapsed < 4, elapsed
    assert body["globalRefreshError"] == "the global refresh ran past the tick's deadline"
    assert body["tenantIngestion"]["skippedTimeBudget"] == 3 and body["tenantIngestion"]["refreshed"] == 0
    assert body["alertSweep"]["tenantsWithRules"] == 1
    assert "ran past the tick's deadline" in capsys.readouterr().err


def test_the_tick_deadline_is_derived_from_the_functions_max_duration() -> None:
    from lib.bundle import read_vercel_config
    from lib.jobs.rss_refresh import REFRESH_MAX_DURATION_S, TICK_DEADLINE_S

    assert read_vercel_config()["functions"]["api/admin/rss/refresh.py"]["maxDuration"] == REFRESH_MAX_DURATION_S
    assert TICK_DEADLINE_S < REFRESH_MAX_DURATION_S


@pytest.mark.reliability
async def test_the_queue_service_down_during_publish_is_reported_and_the_tick_goes_on(
    db, redis, feed_server: FeedServer, set_env
) -> None:
    from lib.local.services import free_port

    set_env(
        ERMIS_QUEUE_SIGNING_SECRET="refresh-test-secret",
        VERCEL_QUEUE_API_TOKEN="local-token",
        VERCEL_QUEUE_BASE_URL=f"http://127.0.0.1:{free_port()}",  # nothing listens there
    )
    await seed(db, feed_server)
    await db.execute("INSERT INTO feature_flag_values (flag_key, enabled) VALUES ('rssQueuePipeline', true)")
    async with client_for(app) as client:
        response = await client.get(PATH, headers=cron_headers())
    body = response.json()
    went_on = response.status_code == 200 and body["inlineRefreshed"] and body["tenantIngestion"]["refreshed"] == 3
    record("faults", "the queue service down during publish", injected=1, recovered=int(went_on))
    assert went_on and body["published"] is False and body["publishError"], body
