"""lib.platform.ai_usage: ledger + outbox in one go, idempotent on the id, and the Redis
retry queue when Postgres is unreachable."""

from __future__ import annotations

import json

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.db.pool import close_pools
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.jobs.ai_ledger_redrive import redrive_failed_ai_ledger_entries
from lib.observability import pseudonym
from lib.platform.ai_ledger_retry import QUEUE_KEY
from lib.platform.ai_usage import AiUsage, metering_event, record_ai_usage, record_ai_usage_after_response
from lib.redis.client import get_redis
from lib.redis.commands import execute_command
from tests.support.functions import OPEN, client_for

USAGE = AiUsage(id="call-1", tenant_scope_id="org_a", user_id="user_9", model="m", input_tokens=10, output_tokens=5)


async def rows(db) -> tuple[list[tuple], list[dict]]:
    ledger = await (await db.execute("SELECT id, user_id, input_tokens FROM ai_usage_ledger")).fetchall()
    outbox = await (await db.execute("SELECT event FROM ai_usage_metering_outbox")).fetchall()
    return [tuple(row) for row in ledger], [row[0] for row in outbox]


def test_the_polar_event_names_the_tenant_never_the_user() -> None:
    event = metering_event(USAGE)
    assert event["name"] == "ai_usage"
    assert event["external_customer_id"] == "org_a"
    assert event["metadata"]["total_tokens"] == 15
    assert "user_9" not in json.dumps(event)
    assert "external_id" not in event


async def test_recording_twice_counts_once(db) -> None:
    assert await record_ai_usage(USAGE) == "ledger"
    assert await record_ai_usage(USAGE) == "ledger"
    ledger, outbox = await rows(db)
    assert ledger == [("call-1", "user_9", 10)]
    assert len(outbox) == 1 and outbox[0]["metadata"]["ledger_id"] == "call-1"


async def test_postgres_unreachable_sends_the_entry_to_redis_then_the_redrive_lands_it(
    db, redis_flavour: str, set_env, database_url: str
) -> None:
    await close_pools()
    set_env(DATABASE_URL="postgresql://nobody@127.0.0.1:1/none", ERMIS_DB_CONNECT_TIMEOUT_S="1")
    assert await record_ai_usage(USAGE) == "retry_queue"
    await close_pools()
    [queued] = await execute_command(get_redis(), "LRANGE", QUEUE_KEY, 0, -1)
    assert json.loads(queued)["id"] == "call-1" and json.loads(queued)["attempts"] == 0

    set_env(DATABASE_URL=database_url)
    assert (await redrive_failed_ai_ledger_entries())["succeeded"] == 1
    ledger, outbox = await rows(db)
    assert ledger == [("call-1", "user_9", 10)] and len(outbox) == 1


async def test_with_both_stores_down_the_entry_is_logged_whole(db, set_env, capsys: pytest.CaptureFixture[str]) -> None:
    await close_pools()
    set_env(
        DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        ERMIS_DB_CONNECT_TIMEOUT_S="1",
        REDIS_URL="redis://127.0.0.1:1/0",
        ERMIS_PSEUDONYM_KEY="pseudonym-key-for-tests",
    )
    with pytest.raises(Exception):  # noqa: B017 - whichever error the Redis client raises
        await record_ai_usage(USAGE)
    await close_pools()
    [line] = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert line["context"] == "ai-usage-lost"
    assert json.loads(line["usage"])["id"] == "call-1"
    assert json.loads(line["usage"])["user_id"] == pseudonym("user_9")  # the person, never their id
    assert "user_9" not in json.dumps(line)


async def test_after_response_recording_lands_once_the_request_is_done(db) -> None:
    async def synthesise(_request: Request) -> Response:
        record_ai_usage_after_response(USAGE)
        return JSONResponse({"story": "done"})

    app = function_app(route("/synthesise", POST=guarded(OPEN, synthesise)))
    async with client_for(app) as client:
        assert (await client.post("/synthesise")).json() == {"story": "done"}
    assert (await rows(db))[0] == [("call-1", "user_9", 10)]
