"""/api/admin/state/cleanup end to end through its api/ file: gates, the two deletes, batches,
the spec's body, and the typed 500 when Postgres is gone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import psycopg
import pytest

from lib.db.pool import close_pools
from lib.jobs.state_cleanup import cleanup_platform_state
from lib.streams.positioner import positioned_now
from tests.support.auth import TEST_CRON_SECRET, cron_headers, session_headers
from tests.support.contract import CLEANUP_RESPONSE_FIELDS
from tests.support.functions import client_for, load_api_app

PATH = "/api/admin/state/cleanup"
app = load_api_app("api/admin/state/cleanup.py")


async def seed(db) -> None:
    await db.execute(
        "INSERT INTO platform_state (key, value, expires_at) VALUES"
        " ('expired:1', '1', now() - interval '1 minute'),"
        " ('expired:2', '2', now() - interval '2 days'),"
        " ('live:ttl', '3', now() + interval '1 hour'),"
        " ('live:forever', '4', NULL)"
    )
    await db.execute(
        "INSERT INTO platform_state_hash (key, field, value, updated_at) VALUES"
        " ('platform:ai-envelope-threshold-firings:t1', 'a', '1', now() - interval '91 days'),"
        " ('platform:ai-envelope-threshold-firings:t1', 'b', '1', now() - interval '89 days'),"
        " ('platform:ai-envelope-threshold-firings:t2', 'a', '1', now() - interval '400 days'),"
        " ('platform:other:t1', 'old', '1', now() - interval '400 days')"
    )
    await db.execute(
        "INSERT INTO queue_batch_claims (topic, batch_id, status, claim_token, lease_until, finished_at) VALUES"
        " ('rss.ingest', 'old-done', 'done', gen_random_uuid(), now(), now() - interval '9 days'),"
        " ('rss.ingest', 'recent-done', 'done', gen_random_uuid(), now(), now() - interval '7 days'),"
        " ('rss.ingest', 'old-released', 'released', gen_random_uuid(), now(), now() - interval '30 days')"
    )


async def remaining(db) -> tuple[list[str], list[tuple[str, str]]]:
    state = [row[0] for row in await (await db.execute("SELECT key FROM platform_state ORDER BY key")).fetchall()]
    hashes = await (await db.execute("SELECT key, field FROM platform_state_hash ORDER BY key, field")).fetchall()
    return state, [tuple(row) for row in hashes]


async def test_cron_get_deletes_exactly_what_the_spec_names(db) -> None:
    await seed(db)
    async with client_for(app) as client:
        response = await client.get(PATH, headers=cron_headers())
    assert response.status_code == 200
    body = response.json()
    assert set(body) == CLEANUP_RESPONSE_FIELDS
    assert (body["deleted"], body["deletedHashRecords"], body["deletedBatchClaims"]) == (2, 2, 1)
    claims = await (await db.execute("SELECT batch_id FROM queue_batch_claims ORDER BY 1")).fetchall()
    assert [row[0] for row in claims] == ["old-released", "recent-done"]  # a released batch can still run
    assert body["processedAt"].endswith("Z")
    assert await remaining(db) == (
        ["live:forever", "live:ttl"],
        [("platform:ai-envelope-threshold-firings:t1", "b"), ("platform:other:t1", "old")],
    )


async def test_stream_positions_past_retention_go_and_leave_their_horizon(db) -> None:
    for index in range(4):
        await db.execute(
            "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
            " VALUES (%s, 'org_a', 'r', %s, 'info', 'in-app')",
            (f"a{index}", f"s{index}"),
        )
    await positioned_now()
    logged = await (await db.execute("SELECT position FROM stream_changes ORDER BY 1")).fetchall()
    positions = [row[0] for row in logged]
    await db.execute(
        "UPDATE stream_changes SET logged_at = now() - interval '8 days' WHERE position = ANY(%s)", (positions[:2],)
    )
    body = await cleanup_platform_state(batch_size=1)  # batches: one row each
    assert body["deletedStreamChanges"] == 2
    left = [row[0] for row in await (await db.execute("SELECT position FROM stream_changes ORDER BY 1")).fetchall()]
    assert left == positions[2:]
    horizon = await (await db.execute("SELECT channel, pruned_through FROM stream_channels")).fetchall()
    assert horizon == [("alerts|org_a", positions[1])]


async def test_finished_webhook_deliveries_go_after_their_retention_and_dead_ones_stay(db) -> None:
    for delivery_id, status, days_ago in [
        ("old-delivered", "delivered", 31),
        ("old-discarded", "discarded", 31),
        ("old-dead", "dead", 31),
        ("new-delivered", "delivered", 1),
        ("pending", "pending", None),
    ]:
        await db.execute(
            "INSERT INTO webhook_deliveries (id, tenant_scope_id, rule_id, payload, status, finished_at)"
            " VALUES (%s, 'org_a', 'r', '{}', %s, now() - %s * interval '1 day')",
            (delivery_id, status, days_ago),
        )
    await db.execute(
        "INSERT INTO webhook_circuits (endpoint_digest, updated_at) VALUES ('gone', now() - interval '31 days')"
    )
    await db.execute("INSERT INTO webhook_circuits (endpoint_digest) VALUES ('recent')")
    body = await cleanup_platform_state(batch_size=1)
    assert body["deletedWebhookDeliveries"] == 2
    left = await (await db.execute("SELECT id FROM webhook_deliveries ORDER BY 1")).fetchall()
    assert [row[0] for row in left] == ["new-delivered", "old-dead", "pending"]
    circuits = await (await db.execute("SELECT endpoint_digest FROM webhook_circuits")).fetchall()
    assert [row[0] for row in circuits] == ["recent"]


async def test_operator_post_with_the_state_surface(db, mint_token: Callable[..., str]) -> None:
    await seed(db)
    async with client_for(app) as client:
        for role in ("ops", "super_admin"):
            response = await client.post(PATH, headers=session_headers(mint_token(platform_role=role)))
            assert response.status_code == 200, role
        assert (await remaining(db))[0] == ["live:forever", "live:ttl"]


@pytest.mark.parametrize("role", ["billing", "compliance"])
async def test_post_without_the_surface_is_403(db, role: str, mint_token: Callable[..., str]) -> None:
    await seed(db)
    async with client_for(app) as client:
        response = await client.post(PATH, headers=session_headers(mint_token(platform_role=role)))
    assert response.status_code == 403
    assert len((await remaining(db))[0]) == 4


async def test_wrong_bearer_is_401_and_the_secret_never_echoes(db, capsys: pytest.CaptureFixture[str]) -> None:
    await seed(db)
    async with client_for(app) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TEST_CRON_SECRET}!"}):
            response = await client.get(PATH, headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"
            assert TEST_CRON_SECRET not in response.text
        # A cron bearer is not an operator session, and a session is not a cron bearer.
        assert (await client.post(PATH, headers=cron_headers())).status_code == 401
    assert TEST_CRON_SECRET not in capsys.readouterr().err
    assert len((await remaining(db))[0]) == 4


async def test_unset_cron_secret_fails_closed(db, set_env) -> None:
    set_env(CRON_SECRET=None)
    async with client_for(app) as client:
        assert (await client.get(PATH, headers={"Authorization": "Bearer "})).status_code == 401
        assert (await client.get(PATH, headers={"Authorization": "Bearer None"})).status_code == 401


async def test_deletes_in_bounded_batches(db) -> None:
    await db.execute(
        "INSERT INTO platform_state (key, value, expires_at)"
        " SELECT 'expired:' || n, '0', now() - interval '1 hour' FROM generate_series(1, 25) AS n"
    )
    await db.execute(
        "INSERT INTO platform_state_hash (key, field, value, updated_at)"
        " SELECT 'platform:ai-envelope-threshold-firings:t', 'f' || n, '0', now() - interval '100 days'"
        " FROM generate_series(1, 7) AS n"
    )
    result = await cleanup_platform_state(batch_size=4)
    assert (result["deleted"], result["deletedHashRecords"]) == (25, 7)
    assert await remaining(db) == ([], [])


async def test_a_row_locked_by_a_writer_is_skipped_not_waited_for(db, database_url: str) -> None:
    await db.execute(
        "INSERT INTO platform_state (key, value, expires_at)"
        " SELECT 'expired:' || n, '0', now() - interval '1 hour' FROM generate_series(1, 10) AS n"
    )
    async with await psycopg.AsyncConnection.connect(database_url) as writer:
        await writer.execute("SELECT 1 FROM platform_state WHERE key = 'expired:3' FOR UPDATE")
        result = await asyncio.wait_for(cleanup_platform_state(batch_size=4), timeout=10)
        assert result["deleted"] == 9
        await writer.rollback()
    assert (await cleanup_platform_state(batch_size=4))["deleted"] == 1


async def test_database_down_is_the_typed_500_logged_once(db, set_env, capsys: pytest.CaptureFixture[str]) -> None:
    await close_pools()
    set_env(DATABASE_URL="postgresql://nobody:sekret-pass@127.0.0.1:1/none", ERMIS_DB_CONNECT_TIMEOUT_S="1")
    async with client_for(app) as client:
        response = await client.get(PATH, headers=cron_headers())
    await close_pools()
    assert response.status_code == 500
    assert response.json()["error"] == {
        "code": "internal_error",
        "message": "The server failed to handle this request.",
        "route": PATH,
    }
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert [line["context"] for line in lines] == [PATH]
    assert "sekret-pass" not in json.dumps(lines)
