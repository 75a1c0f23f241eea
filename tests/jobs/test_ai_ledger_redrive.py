"""lib.jobs.ai_ledger_redrive through both Redis clients and the real ledger: batches land
once, a killed redrive is recovered, poison and malformed entries end on the DLQ."""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
import pytest

from lib.jobs.ai_ledger_redrive import MAX_ATTEMPTS, redrive_failed_ai_ledger_entries
from lib.platform.ai_ledger_retry import DLQ_KEY, PROCESSING_KEY, QUEUE_KEY, enqueue_ai_ledger_retry, retry_entry
from lib.redis.client import get_redis
from lib.redis.commands import execute_command
from tests.support.auth import cron_headers, session_headers
from tests.support.functions import client_for, load_api_app
from tests.support.processes import bundle_process, sigkill
from tests.support.reliability import record
from tests.support.waiting import eventually


def usage_fields(n: int, **overrides) -> dict:
    return {
        "id": f"usage-{n}",
        "tenant_scope_id": "org_a",
        "user_id": f"user_{n % 3}",
        "model": "gpt-test",
        "input_tokens": n,
        "output_tokens": 2 * n,
        **overrides,
    }


async def list_of(key: str) -> list[str]:
    return await execute_command(get_redis(), "LRANGE", key, 0, -1)


async def ledger_ids(db) -> list[str]:
    return [row[0] for row in await (await db.execute("SELECT id FROM ai_usage_ledger ORDER BY id")).fetchall()]


async def claimed(count: int) -> bool:
    return len(await list_of(PROCESSING_KEY)) == count


async def inserted(db, count: int) -> bool:
    return len(await ledger_ids(db)) == count


async def outbox_count(db) -> int:
    return (await (await db.execute("SELECT count(*) FROM ai_usage_metering_outbox")).fetchone())[0]


async def test_without_redis_nothing_is_drained(db, set_env) -> None:
    set_env(REDIS_URL=None)
    assert await redrive_failed_ai_ledger_entries() == {
        "drained": 0,
        "succeeded": 0,
        "requeued": 0,
        "deadLettered": 0,
        "errors": ["redis_not_configured"],
    }


async def test_entries_land_in_the_ledger_and_outbox_once(db, redis_flavour: str) -> None:
    await db.execute("INSERT INTO ai_usage_ledger (id, user_id) VALUES ('usage-1', 'user_1')")
    for n in range(1, 251):
        await enqueue_ai_ledger_retry(usage_fields(n))
    await enqueue_ai_ledger_retry(usage_fields(7))  # the same usage queued twice
    result = await redrive_failed_ai_ledger_entries()
    assert result == {"drained": 251, "succeeded": 251, "requeued": 0, "deadLettered": 0, "errors": []}
    assert len(await ledger_ids(db)) == 250
    assert await outbox_count(db) == 249  # usage-1 was already in the ledger: never billed twice
    assert await list_of(QUEUE_KEY) == [] and await list_of(PROCESSING_KEY) == []


async def test_malformed_entries_go_to_the_dlq_with_a_reason(db, redis_flavour: str) -> None:
    client = get_redis()
    for raw in (
        "not json",
        json.dumps({"no": "id"}),
        json.dumps({"id": ""}),
        json.dumps(usage_fields(1, input_tokens="lots")),
    ):
        await execute_command(client, "LPUSH", QUEUE_KEY, raw)
    await enqueue_ai_ledger_retry(usage_fields(2))
    result = await redrive_failed_ai_ledger_entries()
    assert (result["drained"], result["succeeded"], result["deadLettered"]) == (5, 1, 4)
    reasons = sorted(json.loads(item)["reason"] for item in await list_of(DLQ_KEY))
    assert reasons == [
        "malformed: invalid columns: input_tokens",
        "malformed: no id",
        "malformed: no id",
        "malformed: not JSON",
    ]
    assert await ledger_ids(db) == ["usage-2"]


async def test_a_poison_entry_is_dead_lettered_after_ten_failures_and_reported_once(
    db, redis_flavour: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # An int4 overflow: Postgres rejects this entry, and only this one.
    await enqueue_ai_ledger_retry(usage_fields(1, input_tokens=2**40))
    await enqueue_ai_ledger_retry(usage_fields(2))
    first = await redrive_failed_ai_ledger_entries()
    assert (first["succeeded"], first["requeued"]) == (1, 1)
    for _ in range(MAX_ATTEMPTS - 2):
        assert (await redrive_failed_ai_ledger_entries())["requeued"] == 1
    capsys.readouterr()
    last = await redrive_failed_ai_ledger_entries()
    assert (last["requeued"], last["deadLettered"]) == (0, 1)
    [dead] = await list_of(DLQ_KEY)
    assert json.loads(dead)["reason"] == f"{MAX_ATTEMPTS} attempts failed"
    assert json.loads(json.loads(dead)["entry"])["attempts"] == MAX_ATTEMPTS - 1
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert [(line["context"], line["failed"]) for line in lines] == [("ai-ledger-redrive", 1)]
    assert await redrive_failed_ai_ledger_entries() == {
        "drained": 0, "succeeded": 0, "requeued": 0, "deadLettered": 0, "errors": []
    }  # fmt: skip
    assert await ledger_ids(db) == ["usage-2"]


async def test_postgres_down_requeues_with_one_more_attempt(db, redis_flavour: str, set_env) -> None:
    from lib.db.pool import close_pools

    await execute_command(get_redis(), "LPUSH", QUEUE_KEY, retry_entry(usage_fields(1), attempts=3))
    await close_pools()
    set_env(DATABASE_URL="postgresql://nobody@127.0.0.1:1/none", ERMIS_DB_CONNECT_TIMEOUT_S="1")
    result = await redrive_failed_ai_ledger_entries()
    await close_pools()
    assert (result["drained"], result["requeued"], result["succeeded"]) == (1, 1, 0)
    assert result["errors"] == ["ledger insert failed: PoolTimeout"]
    [requeued] = await list_of(QUEUE_KEY)
    assert json.loads(requeued)["attempts"] == 4


@pytest.mark.reliability
async def test_a_redrive_killed_between_claim_and_ack_is_recovered(db, redis_flavour: str, database_url: str) -> None:
    for n in range(1, 121):
        await enqueue_ai_ledger_retry(usage_fields(n))
    async with await psycopg.AsyncConnection.connect(database_url) as blocker:
        # Hold the ledger so the child's insert waits after its claim.
        await blocker.execute("LOCK TABLE ai_usage_ledger IN EXCLUSIVE MODE")
        with bundle_process("redrive_failed_ai_ledger_entries()", "lib.jobs.ai_ledger_redrive") as child:
            assert await eventually(lambda: claimed(100))
            sigkill(child)
        await blocker.rollback()

    result = await redrive_failed_ai_ledger_entries()
    assert (result["drained"], result["succeeded"]) == (120, 120)
    ids = await ledger_ids(db)
    expected = {f"usage-{n}" for n in range(1, 121)}
    record(
        "kills",
        f"ledger redrive ({redis_flavour}), after the claim, before the insert",
        entries=120,
        lost=len(expected - set(ids)),
        doubled=len(ids) - len(set(ids)),
    )
    assert await ledger_ids(db) == sorted(f"usage-{n}" for n in range(1, 121))
    assert await outbox_count(db) == 120
    assert await list_of(PROCESSING_KEY) == [] and await list_of(QUEUE_KEY) == []


@pytest.mark.reliability
async def test_a_redrive_killed_after_the_insert_before_the_ack_inserts_nothing_twice(
    db, redis, database_url: str, redis_url: str
) -> None:
    """The ack (a Redis write) is held by CLIENT PAUSE WRITE once the batch is in Postgres."""
    from redis.asyncio import Redis

    for n in range(1, 51):
        await enqueue_ai_ledger_retry(usage_fields(n))
    direct = Redis.from_url(redis_url)
    try:
        async with await psycopg.AsyncConnection.connect(database_url) as blocker:
            await blocker.execute("LOCK TABLE ai_usage_ledger IN EXCLUSIVE MODE")  # hold the insert
            with bundle_process("redrive_failed_ai_ledger_entries()", "lib.jobs.ai_ledger_redrive") as child:
                assert await eventually(lambda: claimed(50))
                await direct.execute_command("CLIENT", "PAUSE", "20000", "WRITE")  # the ack will wait
                await blocker.rollback()  # the insert goes through
                assert await eventually(lambda: inserted(db, 50))
                sigkill(child)
    finally:
        await direct.execute_command("CLIENT", "UNPAUSE")
        await direct.aclose()
    assert len(await list_of(PROCESSING_KEY)) == 50  # never acknowledged
    result = await redrive_failed_ai_ledger_entries()
    ids = await ledger_ids(db)
    record(
        "kills",
        "ledger redrive (redis), after the insert, before the ack",
        entries=50,
        lost=50 - len(set(ids)),
        doubled=len(ids) - len(set(ids)) + max(0, await outbox_count(db) - 50),
    )
    assert result["drained"] == 50 and ids == sorted(f"usage-{n}" for n in range(1, 51))
    assert await outbox_count(db) == 50  # the outbox row rode with the ledger insert: not billed twice
    assert await list_of(PROCESSING_KEY) == [] and await list_of(QUEUE_KEY) == []


async def test_route_gates_and_body(db, redis, mint_token: Callable[..., str]) -> None:
    await enqueue_ai_ledger_retry(usage_fields(1))
    app = load_api_app("api/admin/ai/ledger/retry/flush.py")
    path = "/api/admin/ai/ledger/retry/flush"
    async with client_for(app) as client:
        assert (await client.get(path)).status_code == 401
        compliance = session_headers(mint_token(platform_role="compliance"))
        assert (await client.post(path, headers=compliance)).status_code == 403
        response = await client.get(path, headers=cron_headers())
        assert response.json() == {
            "drained": 1,
            "succeeded": 1,
            "requeued": 0,
            "deadLettered": 0,
            "errors": [],
            "staleCrons": [],
        }
        for role in ("billing", "ops", "super_admin"):
            operator = session_headers(mint_token(platform_role=role))
            assert (await client.post(path, headers=operator)).json()["drained"] == 0


@pytest.mark.reliability
async def test_redis_down_during_the_redrive_loses_nothing(db, redis, set_env, redis_url: str) -> None:
    from lib.redis.client import close_redis

    for n in range(1, 31):
        await enqueue_ai_ledger_retry(usage_fields(n))
    await close_redis()
    set_env(REDIS_URL="redis://127.0.0.1:9/0")
    path = "/api/admin/ai/ledger/retry/flush"
    async with client_for(load_api_app("api/admin/ai/ledger/retry/flush.py")) as client:
        down = await client.get(path, headers=cron_headers())
        assert down.status_code == 500 and down.json()["error"]["code"] == "internal_error"
        await close_redis()
        set_env(REDIS_URL=redis_url)  # Redis is back
        back = (await client.get(path, headers=cron_headers())).json()
    ids = await ledger_ids(db)
    recovered = back["succeeded"] == 30 and len(ids) == len(set(ids)) == 30
    record("faults", "Redis down during the ledger redrive", injected=1, recovered=int(recovered))
    assert recovered, back
    assert await list_of(QUEUE_KEY) == [] and await list_of(PROCESSING_KEY) == []
