"""lib.queues.consumer against the SDK's embedded queue service: real sends, leases, push
deliveries to the route, retries with the spec's backoff, the DLQ, and forged messages."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from starlette.types import ASGIApp

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.bundle import bundle_relative_path
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.queues.client import queue_client
from lib.queues.consumer import MAX_RETRY_DELAY_SECONDS, ConsumerOptions, create_queue_consumer, retry_delay_seconds
from lib.queues.consumer_names import vercel_consumer_name
from lib.queues.dead_letters import dead_letter_summary
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.signing import sign_message
from lib.queues.topics import dlq_topic, wire_topic
from tests.support.queue import EmbeddedQueue, embedded_queue, rss_message
from tests.support.reliability import record

TOPIC = "rss.cluster"  # a reserved stage's topic, reused here with test handlers
WIRE = wire_topic(TOPIC)
PATH = "/consume"
CONSUMER = vercel_consumer_name(bundle_relative_path(__file__))
calls: list[tuple[str, int]] = []
failures_left = {"count": 0}
slow = {"seconds": 0.0}


async def flaky(message: dict, metadata: MessageMetadata) -> None:
    calls.append((message["batchId"], metadata.delivery_count))
    await asyncio.sleep(slow["seconds"])
    if failures_left["count"] > 0:
        failures_left["count"] -= 1
        raise RuntimeError("transient failure")


def consumer_app(max_attempts: int = 5) -> ASGIApp:
    receive = create_queue_consumer(TOPIC, flaky, ConsumerOptions(max_attempts=max_attempts), module_file=__file__)
    return function_app(route(PATH, POST=guarded(QUEUE_MESSAGE_HMAC, receive)))


@pytest.fixture
def queue(set_env, db) -> Iterator[EmbeddedQueue]:
    calls.clear()
    failures_left["count"] = 0
    slow["seconds"] = 0.0
    set_env(ERMIS_QUEUE_SIGNING_SECRET="consumer-test-secret")
    with embedded_queue(set_env) as embedded:
        yield embedded


def error_lines(err: str) -> list[dict]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


async def test_a_signed_message_runs_once_and_is_acknowledged(queue: EmbeddedQueue) -> None:
    app = consumer_app()
    assert await publish_message(TOPIC, rss_message("b1")) == "queued"
    [response] = await queue.push(WIRE, app, PATH, CONSUMER)
    assert response.status_code == 200
    assert calls == [("b1", 1)]
    [message] = queue.messages(WIRE)
    assert message.acknowledged


@pytest.mark.reliability
async def test_duplicates_delivered_at_the_same_moment_run_once(queue: EmbeddedQueue) -> None:
    """Three copies of one signed batch, pushed concurrently while the first is running."""
    app = consumer_app()
    signed = sign_message(rss_message("dup"))
    for _ in range(3):
        await queue_client().send(WIRE, signed)
    slow["seconds"] = 0.5
    first = await queue.push(WIRE, app, PATH, CONSUMER, concurrently=True)
    assert [response.status_code for response in first] == [200, 200, 200]
    assert calls == [("dup", 1)]
    held = [message for message in queue.messages(WIRE) if not message.acknowledged]
    assert len(held) == 2  # came back later, not acknowledged while the batch was running
    queue.advance(MAX_RETRY_DELAY_SECONDS)
    await queue.push(WIRE, app, PATH, CONSUMER)
    record(
        "duplicates", "3 copies of one batch pushed at once (queue consumer)", sent=3, **{"extra runs": len(calls) - 1}
    )
    assert calls == [("dup", 1)] and all(message.acknowledged for message in queue.messages(WIRE))


@pytest.mark.reliability
async def test_consumers_keep_working_when_redis_is_down(queue: EmbeddedQueue, set_env) -> None:
    set_env(REDIS_URL="redis://127.0.0.1:9/0")
    app = consumer_app()
    await publish_message(TOPIC, rss_message("no-redis"))
    [response] = await queue.push(WIRE, app, PATH, CONSUMER)
    record("faults", "Redis down during a queue delivery", injected=1, recovered=int(calls == [("no-redis", 1)]))
    assert response.status_code == 200 and calls == [("no-redis", 1)]
    assert queue.messages(WIRE)[0].acknowledged


@pytest.mark.reliability
async def test_a_delivery_after_success_does_no_work(queue: EmbeddedQueue) -> None:
    app = consumer_app()
    signed = sign_message(rss_message("b2"))
    client = queue_client()
    await client.send(WIRE, signed)
    await queue.push(WIRE, app, PATH, CONSUMER)
    await client.send(WIRE, signed)  # the captured message, replayed
    [replayed] = await queue.push(WIRE, app, PATH, CONSUMER)
    record("duplicates", "a captured message replayed after success", sent=1, **{"extra runs": len(calls) - 1})
    assert replayed.status_code == 200
    assert calls == [("b2", 1)]
    assert all(message.acknowledged for message in queue.messages(WIRE))


async def test_a_failed_run_is_retried_with_backoff_and_runs_again(queue: EmbeddedQueue) -> None:
    app = consumer_app()
    failures_left["count"] = 1
    await publish_message(TOPIC, rss_message("b3"))
    await queue.push(WIRE, app, PATH, CONSUMER)
    assert await queue.push(WIRE, app, PATH, CONSUMER) == []  # not visible before the backoff
    queue.advance(retry_delay_seconds(1))
    await queue.push(WIRE, app, PATH, CONSUMER)
    assert calls == [("b3", 1), ("b3", 2)]
    assert queue.messages(WIRE)[0].acknowledged


async def test_a_handler_that_always_fails_ends_on_the_dlq_once(
    queue: EmbeddedQueue, capsys: pytest.CaptureFixture[str]
) -> None:
    app = consumer_app(max_attempts=3)
    failures_left["count"] = 99
    await publish_message(TOPIC, rss_message("b4"))
    for delivery in range(1, 4):
        [response] = await queue.push(WIRE, app, PATH, CONSUMER)
        assert response.status_code == 200
        if delivery < 3:
            # The spec's backoff: invisible until min(300, 2 ** delivery_count) seconds have passed.
            queue.advance(retry_delay_seconds(delivery) - 0.5)
            assert await queue.push(WIRE, app, PATH, CONSUMER) == []
            queue.advance(0.5)
    assert [count for _, count in calls] == [1, 2, 3]
    assert queue.messages(WIRE)[0].acknowledged
    [dead] = queue.payloads(dlq_topic(TOPIC))
    assert set(dead) == {"originalMessageId", "originalTopic", "deliveryCount", "failedAt", "errorMessage"}
    assert (dead["originalTopic"], dead["deliveryCount"]) == (TOPIC, 3)
    assert dead["originalMessageId"] == queue.messages(WIRE)[0].message_id
    assert "transient failure" in dead["errorMessage"] and len(dead["errorMessage"]) <= 500
    assert await queue.push(WIRE, app, PATH, CONSUMER) == []
    assert len(error_lines(capsys.readouterr().err)) == 3  # one per failed delivery


FORGERIES = {
    "missing signature": lambda signed: {k: v for k, v in signed.items() if k != "signature"},
    "bad signature": lambda signed: {**signed, "signature": "f" * 64},
    "another payload's signature": lambda signed: {**signed, "batchId": "someone-else"},
    "wrong length": lambda signed: {**signed, "signature": signed["signature"][:40]},
    "non-hex": lambda signed: {**signed, "signature": "g" * 64},
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
async def test_forged_messages_are_acknowledged_without_work(
    queue: EmbeddedQueue, forgery: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = consumer_app()
    forged = FORGERIES[forgery](sign_message(rss_message("b5")))
    await queue_client().send(WIRE, forged)
    [response] = await queue.push(WIRE, app, PATH, CONSUMER)
    assert response.status_code == 200
    assert calls == []
    assert queue.messages(WIRE)[0].acknowledged
    assert queue.messages(dlq_topic(TOPIC)) == []
    [logged] = error_lines(capsys.readouterr().err)
    assert logged["context"] == f"queues:{TOPIC}" and "invalid signature" in logged["error"]
    assert logged["deliveryCount"] == 1 and logged["messageId"] == queue.messages(WIRE)[0].message_id


async def test_a_verified_message_outside_its_contract_is_dead_lettered_at_once_with_the_reason(
    queue: EmbeddedQueue, capsys: pytest.CaptureFixture[str]
) -> None:
    app = consumer_app()
    skewed = {k: v for k, v in rss_message("b7").items() if k != "requestedAt"}
    await queue_client().send(WIRE, sign_message({**skewed, "score": 0.5}))  # a newer producer's field
    [response] = await queue.push(WIRE, app, PATH, CONSUMER)
    assert response.status_code == 200 and calls == []
    assert queue.messages(WIRE)[0].acknowledged
    reason = "not a SignedRssQueueMessage: requestedAt: Field required; score: Extra inputs are not permitted"
    [dead] = queue.payloads(dlq_topic(TOPIC))
    assert (dead["deliveryCount"], dead["errorMessage"]) == (1, reason)
    [shown] = (await dead_letter_summary())["latest"]  # what the operators' queue view lists
    assert shown["error_message"] == reason
    assert reason in error_lines(capsys.readouterr().err)[0]["error"]


@pytest.mark.parametrize(
    ("field", "value"), [("count", 2**60), ("score", float("nan")), ("ratio", float("-inf")), ("ids", [1, -(2**53)])]
)
async def test_a_message_javascript_cannot_have_signed_is_refused_not_crashed_on(
    queue: EmbeddedQueue, field: str, value: object, capsys: pytest.CaptureFixture[str]
) -> None:
    app = consumer_app()
    signed = sign_message(rss_message("b6"))
    await queue_client().send(WIRE, {**signed, field: value})
    [response] = await queue.push(WIRE, app, PATH, CONSUMER)
    assert response.status_code == 200
    assert calls == [] and queue.messages(WIRE)[0].acknowledged
    assert queue.messages(dlq_topic(TOPIC)) == []
    [logged] = error_lines(capsys.readouterr().err)
    assert logged["error"].startswith(f"rejected a message: unrepresentable value: {field}")


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b'{"batchId": "x"}', {}),
        (b'{"batchId": "x"}', {"ce-vqsqueuename": WIRE}),
        (b"not json", {"ce-vqsqueuename": WIRE, "ce-type": "com.vercel.queue.v2beta"}),
        (b'{"batchId": "x"}', {"ce-vqsqueuename": "rss-ingest"}),
    ],
)
async def test_a_malformed_push_delivery_is_a_4xx(queue: EmbeddedQueue, body: bytes, headers: dict) -> None:
    from tests.support.functions import client_for

    async with client_for(consumer_app()) as client:
        response = await client.post(PATH, content=body, headers=headers)
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["code"] == "malformed_delivery"
    assert calls == []
