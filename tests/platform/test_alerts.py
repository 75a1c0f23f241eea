"""lib.platform.alerts: rules match, each (rule, story) fires once, webhooks are signed and
logged (delivered, failed with the code, 0 with no answer), email goes through the sender,
and the sweep peeks without building."""

from __future__ import annotations

import hmac
import json
import time

import pytest

from lib.db.state_store import set_state
from lib.platform.aggregation.sources import GLOBAL_SCOPE
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.platform.alerts.evaluation import evaluate_alert_rules
from lib.platform.alerts.rules import AlertRule, get_alert_rules, rules_key
from lib.platform.alerts.sweep import evaluate_instant_alert_rules_for_all_tenants
from lib.platform.alerts.webhooks import sign_webhook, webhook_signing_key
from tests.support.catalogs import add_tenant, set_catalog
from tests.support.env import allow_egress
from tests.support.feeds import FeedServer, rss
from tests.support.outbound import MALFORMED_URLS, Counting, Receiver, Trickler
from tests.support.servers import serve_in_thread

STORIES = [
    {"id": "s1", "headline": "Earthquake in Chile", "summary": "A strong quake."},
    {"id": "s2", "headline": "Markets rally", "summary": "Stocks rose after the EARTHQUAKE fears eased."},
    {"id": "s3", "headline": "Frog discovered", "summary": ""},
]


async def delivery_logs(db) -> list[tuple]:
    cursor = await db.execute("SELECT method, response_code, status, endpoint FROM delivery_logs ORDER BY created_at")
    return [tuple(row) for row in await cursor.fetchall()]


def test_rules_match_keywords_case_insensitively() -> None:
    rule = AlertRule(id="r", keywords=["earthquake", "  "])
    assert [rule.matches(story) for story in STORIES] == [True, True, False]


async def test_in_app_alerts_fire_once_per_rule_and_story(db) -> None:
    rule = AlertRule(id="quakes", keywords=["earthquake"], severity="critical")
    assert await evaluate_alert_rules("org_a", STORIES, [rule]) == 2
    assert await evaluate_alert_rules("org_a", STORIES, [rule]) == 0
    assert await evaluate_alert_rules("org_b", STORIES, [rule]) == 2
    rows = await (await db.execute("SELECT tenant_scope_id, story_id, severity, channel FROM alert_history")).fetchall()
    assert sorted(tuple(row) for row in rows) == [
        ("org_a", "s1", "critical", "in-app"),
        ("org_a", "s2", "critical", "in-app"),
        ("org_b", "s1", "critical", "in-app"),
        ("org_b", "s2", "critical", "in-app"),
    ]
    assert await delivery_logs(db) == []


async def test_webhook_delivered_and_verifiable(db, set_env) -> None:
    receiver = Receiver(200)
    with serve_in_thread(receiver.app) as url:
        allow_egress(set_env, url)
        rule = AlertRule(id="hook", keywords=["frog"], channel="webhook", endpoint=f"{url}/hook")
        assert await evaluate_alert_rules("org_a", STORIES, [rule]) == 1
    [(headers, body)] = receiver.received
    key = await webhook_signing_key("org_a")
    expected = sign_webhook(key, headers["x-ermis-timestamp"], body)
    assert hmac.compare_digest(headers["x-ermis-signature"], expected)
    assert json.loads(body)["storyId"] == "s3"
    assert headers["x-ermis-delivery-id"] == json.loads(body)["id"]
    assert await delivery_logs(db) == [("webhook", 200, "delivered", f"{url}/…")]


@pytest.mark.parametrize(("receiver", "code"), [(Receiver(500), 500), (Receiver(hang=True), 0)])
async def test_webhook_failures_are_logged_never_raised(db, set_env, receiver: Receiver, code: int) -> None:
    set_env(ERMIS_WEBHOOK_TIMEOUT_S="0.5")
    with serve_in_thread(receiver.app) as url:
        allow_egress(set_env, url)
        rule = AlertRule(id="hook", keywords=["frog"], channel="webhook", endpoint=f"{url}/hook")
        assert await evaluate_alert_rules("org_a", STORIES, [rule]) == 1
    assert await delivery_logs(db) == [("webhook", code, "failed", f"{url}/…")]


async def test_email_without_a_sender_is_logged_as_not_delivered_and_why(db) -> None:
    rule = AlertRule(id="mail", keywords=["markets"], channel="email")
    assert await evaluate_alert_rules("org_a", STORIES, [rule]) == 1
    assert await delivery_logs(db) == [("email", 0, "failed", None)]
    detail = await (await db.execute("SELECT detail FROM delivery_logs")).fetchone()
    assert detail == ("no email sender configured",)


async def test_email_goes_through_a_configured_sender(db, monkeypatch: pytest.MonkeyPatch) -> None:
    from lib.platform.alerts import delivery

    sent: list[tuple[str, dict]] = []

    class Outbox:
        async def send(self, tenant_scope_id: str, alert: dict) -> None:
            sent.append((tenant_scope_id, alert))

    monkeypatch.setattr(delivery, "email_sender", Outbox())
    rule = AlertRule(id="mail", keywords=["markets"], channel="email")
    assert await evaluate_alert_rules("org_a", STORIES, [rule]) == 1
    assert [tenant for tenant, _ in sent] == ["org_a"]
    assert await delivery_logs(db) == [("email", 200, "delivered", None)]


async def test_sweep_peeks_counts_and_isolates(
    db, redis, feed_server: FeedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    feed_server.feeds["a"] = rss("A", [("Earthquake in Chile", "https://a.example/q", "Big.")])
    await set_catalog(db, "default", [feed_server.url("a")])
    await set_catalog(db, "unbuilt", [feed_server.url("a")])
    await add_tenant(db, "org_built", "default")
    await add_tenant(db, "org_unbuilt", "unbuilt")
    await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    fetches = feed_server.total_fetches()
    rule = [{"id": "q", "keywords": ["earthquake"]}]
    for tenant in ("org_built", "org_unbuilt", "org_without_profile"):
        await set_state(rules_key(tenant), rule)
    result = await evaluate_instant_alert_rules_for_all_tenants()
    assert result == {
        "tenantsWithRules": 3,
        "evaluated": 1,
        "skippedNoFeedCache": 1,
        "skippedNoProfile": 1,  # rules but no newsroom profile: not a failure every tick
        "failed": 0,
        "skippedDeadline": 0,
        "webhookRetriesWoken": 0,
    }
    assert feed_server.total_fetches() == fetches  # the sweep never builds
    assert "sweep evaluation failed" not in capsys.readouterr().err
    rows = await (await db.execute("SELECT tenant_scope_id FROM alert_history")).fetchall()
    assert [row[0] for row in rows] == ["org_built"]
    again = await evaluate_instant_alert_rules_for_all_tenants()
    assert again["evaluated"] == 1
    assert (await (await db.execute("SELECT count(*) FROM alert_history")).fetchone())[0] == 1


async def test_a_trickling_receiver_fails_at_the_deadline_and_stalls_no_other_tenant(
    db, redis, set_env, feed_server: FeedServer
) -> None:
    """The slow tenant's receiver trickles its answer for 60 s: its delivery fails when the
    whole request's deadline passes, and the other tenant's alert of the same tick is
    delivered while the slow one is still trickling."""
    set_env(ERMIS_WEBHOOK_TIMEOUT_S="2")
    feed_server.feeds["a"] = rss("A", [("Frog discovered", "https://a.example/f", "A new frog.")])
    await set_catalog(db, "default", [feed_server.url("a")])
    for tenant in ("org_slow", "org_fast"):
        await add_tenant(db, tenant, "default")
    await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    trickler, fast = Trickler(for_s=60, every_s=1), Counting()
    with trickler.serving() as slow_url, serve_in_thread(fast.app) as fast_url:
        allow_egress(set_env, slow_url, fast_url)
        await set_state(
            rules_key("org_slow"), [{"id": "s", "keywords": ["frog"], "channel": "webhook", "endpoint": slow_url}]
        )
        await set_state(
            rules_key("org_fast"), [{"id": "f", "keywords": ["frog"], "channel": "webhook", "endpoint": fast_url}]
        )
        started = time.monotonic()
        summary = await evaluate_instant_alert_rules_for_all_tenants()
        finished = time.monotonic()
    assert summary["evaluated"] == 2 and summary["failed"] == 0
    assert trickler.opened is not None and fast.count == 1
    assert fast.times[0] < trickler.opened + 2  # delivered before the slow one's deadline, not after it
    assert finished - started < 30  # the 60 s trickle did not hold the tick
    logs = await (
        await db.execute("SELECT tenant_scope_id, response_code, status, detail FROM delivery_logs")
    ).fetchall()
    assert sorted(tuple(row) for row in logs) == [
        ("org_fast", 200, "delivered", None),
        ("org_slow", 0, "failed", "no answer within 2 s"),
    ]


async def test_a_malformed_endpoint_fails_alone_and_the_tenants_other_alerts_go_on(db, set_env) -> None:
    good = Counting()
    with serve_in_thread(good.app) as url:
        allow_egress(set_env, url)
        rules = [
            AlertRule(id=f"bad{index}", keywords=["frog"], channel="webhook", endpoint=endpoint)
            for index, endpoint in enumerate(MALFORMED_URLS)
        ]
        rules.append(AlertRule(id="good", keywords=["frog"], channel="webhook", endpoint=f"{url}/hook"))
        assert await evaluate_alert_rules("org_a", STORIES, rules) == len(rules)
    assert good.count == 1
    rows = await (
        await db.execute(
            "SELECT a.rule_id, d.response_code, d.status, d.detail FROM delivery_logs d"
            " JOIN alert_history a ON a.id = d.delivery_id"
        )
    ).fetchall()
    logged = {row[0]: tuple(row[1:]) for row in rows}
    assert logged.pop("good") == (200, "delivered", None)
    assert logged == {f"bad{index}": (0, "failed", detail) for index, detail in enumerate(MALFORMED_URLS.values())}


async def test_an_invalid_rule_is_logged_without_its_endpoint(db, capsys: pytest.CaptureFixture[str]) -> None:
    secret_hook = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"
    await set_state(rules_key("org_a"), [{"id": "r1", "keywords": [], "channel": "webhook", "endpoint": secret_hook}])
    assert await get_alert_rules("org_a") == []
    logged = capsys.readouterr().err
    assert "invalid alert rule" in logged and '"ruleId": "r1"' in logged and "keywords" in logged
    assert "XXXXSECRET" not in logged and "hooks.slack.com" not in logged
