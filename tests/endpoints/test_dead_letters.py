"""/api/admin/dead-letters and /api/admin/audit: the three sources of stuck work in one list,
redrive and delete acting once per entry under concurrent requests, the audit trail, paging
through the merged list and validation. The cross-site refusals of a cookie-authenticated
action are in ``tests/security/test_same_origin.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.bundle import bundle_relative_path
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.platform.ai_ledger_retry import DLQ_KEY, QUEUE_KEY, dead_letter, retry_entry
from lib.queues.consumer import ConsumerOptions, create_queue_consumer, retry_delay_seconds
from lib.queues.consumer_names import vercel_consumer_name
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.topics import wire_topic
from lib.redis.client import get_redis
from lib.redis.commands import execute_command
from tests.support.auth import session_headers
from tests.support.functions import client_for, load_api_app
from tests.support.queue import EmbeddedQueue, embedded_queue, rss_message
from tests.support.reliability import record

DEAD_LETTERS = load_api_app("api/admin/dead-letters.py")
AUDIT = load_api_app("api/admin/audit.py")
PATH = "/api/admin/dead-letters"
TOPIC = "rss.cluster"
WIRE = wire_topic(TOPIC)
CONSUMER = vercel_consumer_name(bundle_relative_path(__file__))
handled: list[tuple[str, int]] = []
failing = {"on": True}


async def sometimes_failing(message: dict, metadata: MessageMetadata) -> None:
    handled.append((message["batchId"], metadata.delivery_count))
    if failing["on"]:
        raise RuntimeError("the enrichment service is down")


@pytest.fixture
def queue(set_env, db, redis) -> Iterator[EmbeddedQueue]:
    handled.clear()
    failing["on"] = True
    set_env(ERMIS_QUEUE_SIGNING_SECRET="dead-letter-test-secret")
    with embedded_queue(set_env) as embedded:
        yield embedded


def operator(mint_token: Callable[..., str], role: str = "ops", sub: str = "user_oncall") -> dict[str, str]:
    return session_headers(mint_token(platform_role=role, sub=sub))


async def act(client: httpx.AsyncClient, headers: dict[str, str], **body: object) -> httpx.Response:
    return await client.post(PATH, headers=headers, json=body)


async def entries(client: httpx.AsyncClient, headers: dict[str, str], query: str = "") -> list[dict]:
    response = await client.get(f"{PATH}{query}", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["entries"]


@pytest.mark.reliability
async def test_a_queue_dead_letter_is_redriven_once_and_its_consumer_runs_again(
    queue: EmbeddedQueue, db, mint_token: Callable[..., str]
) -> None:
    receive = create_queue_consumer(TOPIC, sometimes_failing, ConsumerOptions(max_attempts=2), module_file=__file__)
    consumer = function_app(route("/consume", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
    await publish_message(TOPIC, rss_message("b-dead"))
    await queue.push(WIRE, consumer, "/consume", CONSUMER)
    queue.advance(retry_delay_seconds(1))
    await queue.push(WIRE, consumer, "/consume", CONSUMER)
    assert handled == [("b-dead", 1), ("b-dead", 2)]

    headers = operator(mint_token)
    async with client_for(DEAD_LETTERS) as client:
        [entry] = await entries(client, headers, "?source=queue")
        assert (entry["source"], entry["attempts"]) == ("queue", 2)
        assert "the enrichment service is down" in entry["error"]
        assert entry["payload"]["topic"] == TOPIC and entry["payload"]["message"]["batchId"] == "b-dead"

        first, second = await asyncio.gather(
            act(client, headers, action="redrive", source="queue", ids=[entry["id"]]),
            act(client, headers, action="redrive", source="queue", ids=[entry["id"]]),
        )
        outcomes = sorted(response.json()["results"][0]["outcome"] for response in (first, second))
        assert outcomes == ["already_redriven", "redriven"]
        assert await entries(client, headers) == []

    redriven = [message for message in queue.messages(WIRE) if not message.acknowledged]
    record(
        "duplicates",
        "a queue dead letter redriven by two requests at once",
        sent=2,
        **{"extra runs": len(redriven) - 1},
    )
    assert len(redriven) == 1  # sent once, signed anew
    failing["on"] = False
    [pushed] = await queue.push(WIRE, consumer, "/consume", CONSUMER)
    assert pushed.status_code == 200 and handled[-1] == ("b-dead", 1)

    async with client_for(AUDIT) as client:
        audit = (await client.get("/api/admin/audit", headers=headers)).json()["entries"]
    assert [(row["actor"], row["action"], row["source"], row["targetIds"]) for row in audit] == [
        ("user_oncall", "redrive", "queue", [entry["id"]]),
        ("user_oncall", "redrive", "queue", [entry["id"]]),
    ]
    assert sorted(row["outcome"][0]["outcome"] for row in audit) == ["already_redriven", "redriven"]


async def ledger_items() -> tuple[list[str], list[str]]:
    client = get_redis()
    return (
        list(await execute_command(client, "LRANGE", QUEUE_KEY, 0, -1)),
        list(await execute_command(client, "LRANGE", DLQ_KEY, 0, -1)),
    )


@pytest.mark.reliability
async def test_ledger_dead_letters_go_back_on_the_retry_queue_with_attempts_reset(
    db, redis, mint_token: Callable[..., str]
) -> None:
    good = retry_entry({"id": "usage-1", "tenant_scope_id": "org_a", "model": "m", "input_tokens": 3}, attempts=9)
    client = get_redis()
    await execute_command(client, "LPUSH", DLQ_KEY, dead_letter(good, "10 attempts failed"))
    await execute_command(client, "LPUSH", DLQ_KEY, dead_letter("{not json", "malformed: not JSON"))
    headers = operator(mint_token, role="super_admin", sub="user_admin")
    async with client_for(DEAD_LETTERS) as http:
        listed = {entry["error"]: entry for entry in await entries(http, headers, "?source=ledger")}
        assert set(listed) == {"10 attempts failed", "malformed: not JSON"}
        usage = listed["10 attempts failed"]
        assert usage["attempts"] == 10 and usage["payload"]["id"] == "usage-1"

        both = await asyncio.gather(
            act(http, headers, action="redrive", source="ledger", ids=[usage["id"]]),
            act(http, headers, action="redrive", source="ledger", ids=[usage["id"]]),
        )
        assert sorted(response.json()["results"][0]["outcome"] for response in both) == ["not_found", "redriven"]
        queued, dead = await ledger_items()
        record(
            "duplicates",
            "a ledger DLQ entry redriven by two requests at once",
            sent=2,
            **{"extra runs": len(queued) - 1},
        )
        assert len(dead) == 1  # the malformed one stays
        assert [json.loads(item) for item in queued] == [{**json.loads(good), "attempts": 0}]

        broken = listed["malformed: not JSON"]["id"]
        refused = await act(http, headers, action="redrive", source="ledger", ids=[broken])
        assert refused.json()["results"][0]["outcome"] == "not_redrivable"
        deleted = await act(http, headers, action="delete", source="ledger", ids=[broken], reason="garbage")
        assert deleted.json()["results"] == [{"id": broken, "outcome": "deleted"}]
        assert await ledger_items() == (queued, [])


async def seed_exhausted_metering_rows(db, count: int) -> list[str]:
    rows = await (
        await db.execute(
            "INSERT INTO ai_usage_metering_outbox (event, status, attempt_count, last_error, last_attempt_at)"
            " SELECT jsonb_build_object('name', 'ai_usage', 'n', n), 'failed', 5, 'Polar said 500',"
            " now() - make_interval(mins => n) FROM generate_series(1, %s) AS n RETURNING id",
            (count,),
        )
    ).fetchall()
    return [str(row[0]) for row in rows]


@pytest.mark.reliability
async def test_metering_rows_are_reset_or_discarded_once(db, redis, mint_token: Callable[..., str]) -> None:
    first, second = await seed_exhausted_metering_rows(db, 2)
    await db.execute("INSERT INTO ai_usage_metering_outbox (event, status, attempt_count) VALUES ('{}', 'failed', 2)")
    headers = operator(mint_token)
    async with client_for(DEAD_LETTERS) as http:
        listed = await entries(http, headers, "?source=metering")
        assert [entry["id"] for entry in listed] == [first, second]  # newest failure first; attempts left: not listed
        assert (listed[0]["attempts"], listed[0]["error"]) == (5, "Polar said 500")
        both = await asyncio.gather(
            act(http, headers, action="redrive", source="metering", ids=[first]),
            act(http, headers, action="redrive", source="metering", ids=[first]),
        )
        redriven = [r for r in both if r.json()["results"][0]["outcome"] == "redriven"]
        record(
            "duplicates", "a metering row redriven by two requests at once", sent=2, **{"extra runs": len(redriven) - 1}
        )
        assert sorted(r.json()["results"][0]["outcome"] for r in both) == ["already_redriven", "redriven"]
        gone = await act(http, headers, action="delete", source="metering", ids=[second, "999"], reason="test data")
        assert gone.json()["results"] == [{"id": second, "outcome": "deleted"}, {"id": "999", "outcome": "not_found"}]
        again = await act(http, headers, action="redrive", source="metering", ids=[second])
        assert again.json()["results"] == [{"id": second, "outcome": "already_deleted"}]
    states = await (
        await db.execute("SELECT id::text, status, attempt_count FROM ai_usage_metering_outbox ORDER BY id")
    ).fetchall()
    assert [tuple(row) for row in states][:2] == [(first, "pending", 0), (second, "discarded", 5)]


async def test_the_merged_list_pages_through_every_source_newest_first(
    db, redis, mint_token: Callable[..., str]
) -> None:
    for minutes in (1, 4):
        await db.execute(
            "INSERT INTO queue_dead_letters (topic, original_message_id, delivery_count, error_message, payload,"
            " failed_at) VALUES ('rss.ingest', 'm', 5, 'boom', '{}', now() - make_interval(mins => %s))",
            (minutes,),
        )
    await seed_exhausted_metering_rows(db, 3)  # failed 1, 2, 3 minutes ago
    client = get_redis()
    for minutes in (0, 5):
        envelope = json.loads(dead_letter(retry_entry({"id": f"u{minutes}"}), "10 attempts failed"))
        envelope["deadLetteredAt"] = f"2000-01-01T00:0{minutes}:00.000Z" if minutes else envelope["deadLetteredAt"]
        await execute_command(client, "LPUSH", DLQ_KEY, json.dumps(envelope))
    headers = operator(mint_token)
    seen: list[dict] = []
    async with client_for(DEAD_LETTERS) as http:
        query = "?limit=2"
        while True:
            page = (await http.get(f"{PATH}{query}", headers=headers)).json()
            assert len(page["entries"]) <= 2
            seen += page["entries"]
            if page["nextCursor"] is None:
                break
            query = f"?limit=2&cursor={page['nextCursor']}"
    assert len(seen) == 7 and len({(entry["source"], entry["id"]) for entry in seen}) == 7
    assert [entry["failedAt"] for entry in seen] == sorted((entry["failedAt"] for entry in seen), reverse=True)
    assert [entry["source"] for entry in seen] == [
        "ledger", "metering", "queue", "metering", "metering", "queue", "ledger"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "code"),
    [("?source=kafka", "invalid_source"), ("?limit=0", "invalid_limit"), ("?limit=x", "invalid_limit"),
     ("?cursor=bm9wZQ", "invalid_cursor"), ("?cursor=%25%25", "invalid_cursor")],
)  # fmt: skip
async def test_bad_list_queries_are_400(db, redis, mint_token: Callable[..., str], query: str, code: str) -> None:
    async with client_for(DEAD_LETTERS) as http:
        response = await http.get(f"{PATH}{query}", headers=operator(mint_token))
    assert response.status_code == 400 and response.json()["error"]["code"] == code


@pytest.mark.parametrize(
    "body",
    [
        {"action": "retry", "source": "queue", "ids": ["1"]},
        {"action": "redrive", "source": "kafka", "ids": ["1"]},
        {"action": "redrive", "source": "queue", "ids": []},
        {"action": "redrive", "source": "queue", "ids": ["1"] * 101},
        {"action": "redrive", "source": "queue", "ids": [7]},
        {"action": "delete", "source": "queue", "ids": ["1"]},
        {"action": "delete", "source": "queue", "ids": ["1"], "reason": "  "},
        {"action": "redrive", "source": "queue", "ids": ["1"], "extra": True},
        ["redrive"],
    ],
)
async def test_bad_actions_are_400_and_change_nothing(db, redis, mint_token: Callable[..., str], body) -> None:
    await db.execute(
        "INSERT INTO queue_dead_letters (id, topic, original_message_id, delivery_count, error_message, payload)"
        " VALUES (1, 'rss.ingest', 'm', 5, 'boom', '{}')"
    )
    async with client_for(DEAD_LETTERS) as http:
        response = await http.post(PATH, headers=operator(mint_token), json=body)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_dead_letter_action"
    assert (await (await db.execute("SELECT count(*) FROM ops_audit_log")).fetchone())[0] == 0
    assert (await (await db.execute("SELECT resolution FROM queue_dead_letters")).fetchone())[0] is None


async def test_only_the_queues_surface_sees_or_acts(db, redis, mint_token: Callable[..., str]) -> None:
    async with client_for(DEAD_LETTERS) as http, client_for(AUDIT) as audit:
        assert (await http.get(PATH)).status_code == 401
        for role in ("billing", "compliance"):
            headers = session_headers(mint_token(platform_role=role))
            assert (await http.get(PATH, headers=headers)).status_code == 403
            assert (await act(http, headers, action="redrive", source="queue", ids=["1"])).status_code == 403
            assert (await audit.get("/api/admin/audit", headers=headers)).status_code == 403
        member = session_headers(mint_token(org_id="org_a", org_role="org:owner"))
        assert (await http.get(PATH, headers=member)).status_code == 403
        assert (await audit.get("/api/admin/audit?limit=0", headers=operator(mint_token))).status_code == 400
