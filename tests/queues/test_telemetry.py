"""Queue telemetry written by the consumer wrapper itself, through the SDK's embedded queue:
published, delivered, succeeded, retried, dead-lettered and rejected messages counted per topic,
the last failure's error kept, the delivery age measured — and shown by /api/admin/queues."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.bundle import bundle_relative_path
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.queues.client import queue_client
from lib.queues.consumer import ConsumerOptions, create_queue_consumer, retry_delay_seconds
from lib.queues.consumer_names import vercel_consumer_name
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.signing import sign_message
from lib.queues.telemetry import SHARDS, read_topic_telemetry, record_delivery
from lib.queues.topics import wire_topic
from tests.support.auth import session_headers
from tests.support.functions import client_for, load_api_app
from tests.support.queue import EmbeddedQueue, embedded_queue, rss_message

TOPIC = "rss.synthesize"
WIRE = wire_topic(TOPIC)
CONSUMER = vercel_consumer_name(bundle_relative_path(__file__))
failing_batches: set[str] = set()


async def handler(message: dict, _metadata: MessageMetadata) -> None:
    if message["batchId"] in failing_batches:
        raise RuntimeError(f"synthesis failed for {message['batchId']}")


@pytest.fixture
def queue(set_env, db) -> Iterator[EmbeddedQueue]:
    failing_batches.clear()
    set_env(ERMIS_QUEUE_SIGNING_SECRET="telemetry-test-secret")
    with embedded_queue(set_env) as embedded:
        yield embedded


async def test_every_outcome_is_counted_per_topic(queue: EmbeddedQueue, db, mint_token: Callable[..., str]) -> None:
    receive = create_queue_consumer(TOPIC, handler, ConsumerOptions(max_attempts=2), module_file=__file__)
    app = function_app(route("/consume", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
    failing_batches.add("bad")
    queue.server.state.now = datetime.now(UTC) - timedelta(seconds=3)  # messages sent 3 s ago
    for batch in ("ok-1", "ok-2", "bad"):
        await publish_message(TOPIC, rss_message(batch))
    await queue_client().send(WIRE, {**sign_message(rss_message("forged")), "batchId": "tampered"})
    await queue.push(WIRE, app, "/consume", CONSUMER)  # ok-1, ok-2 succeed; bad fails; the forgery is rejected
    queue.advance(retry_delay_seconds(1))
    await queue.push(WIRE, app, "/consume", CONSUMER)  # bad's last attempt: dead-lettered

    counted = (await read_topic_telemetry())[TOPIC]
    assert {key: counted[key] for key in ("published", "deliveries", "successes", "retries", "deadLetters")} == {
        "published": 3,
        "deliveries": 5,
        "successes": 2,
        "retries": 1,
        "deadLetters": 1,
    }
    assert counted["rejected"] == 1
    assert counted["lastSuccessAt"] is not None and counted["lastFailureAt"] is not None
    assert "synthesis failed for bad" in counted["lastError"]
    assert 3000 <= counted["lastDeliveryAgeMs"] < 30_000
    dead = await (await db.execute("SELECT topic, delivery_count, payload FROM queue_dead_letters")).fetchall()
    assert [(row[0], row[1], row[2]["batchId"]) for row in dead] == [(TOPIC, 2, "bad")]

    async with client_for(load_api_app("api/admin/queues.py")) as client:
        body = (await client.get("/api/admin/queues", headers=session_headers(mint_token(platform_role="ops")))).json()
    topics = {topic["topic"]: topic for topic in body["topics"]}
    assert set(topics) == {"rss.ingest", "rss.enrich", "rss.cluster", "rss.synthesize"}
    assert topics[TOPIC]["deadLetters"] == 1 and topics[TOPIC]["wireTopic"] == WIRE
    assert topics["rss.ingest"]["deliveries"] == 0 and topics["rss.ingest"]["lastError"] is None


async def test_concurrent_deliveries_spread_over_shards_and_sum_exactly(db) -> None:
    await asyncio.gather(*(record_delivery(TOPIC, "succeeded") for _ in range(200)))
    counted = (await read_topic_telemetry())[TOPIC]
    assert (counted["deliveries"], counted["successes"]) == (200, 200)
    rows = (await (await db.execute("SELECT count(*) FROM queue_topic_telemetry")).fetchone())[0]
    assert 1 < rows <= SHARDS


async def test_a_telemetry_write_that_fails_never_fails_the_delivery(queue: EmbeddedQueue, db) -> None:
    await db.execute("ALTER TABLE queue_topic_telemetry RENAME TO queue_topic_telemetry_moved")
    try:
        receive = create_queue_consumer(TOPIC, handler, module_file=__file__)
        app = function_app(route("/consume", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
        assert await publish_message(TOPIC, rss_message("still-works")) == "queued"
        [response] = await queue.push(WIRE, app, "/consume", CONSUMER)
    finally:
        await db.execute("ALTER TABLE queue_topic_telemetry_moved RENAME TO queue_topic_telemetry")
    assert response.status_code == 200 and queue.messages(WIRE)[0].acknowledged
