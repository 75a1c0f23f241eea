"""What an error report carries out of the process (``lib.observability``): a queue consumer's
handler fails while a tenant's webhook signing key, the signature it made and the message's
payload and signature are in scope — the kind of failure the webhook delivery and every
consumer report. The event the Sentry SDK sends to its DSN (a real HTTP receiver on loopback)
names the error and where it happened, and holds none of them: no frame's local variables."""

from __future__ import annotations

import json
import secrets

import pytest

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.bundle import bundle_relative_path
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.platform.alerts.webhooks import sign_webhook
from lib.queues.consumer import ConsumerOptions, create_queue_consumer
from lib.queues.consumer_names import vercel_consumer_name
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.topics import wire_topic
from tests.queues.test_consumer import PATH, TOPIC
from tests.support.queue import embedded_queue, rss_message
from tests.support.security import record
from tests.support.sentry import sentry_sink

pytestmark = pytest.mark.security

CONSUMER = vercel_consumer_name(bundle_relative_path(__file__))
SIGNING_KEY = secrets.token_hex(32)
PAYLOAD_MARK = "payload-" + secrets.token_hex(8)


async def deliver_then_fail(message: dict, metadata: MessageMetadata) -> None:
    body = json.dumps(message).encode()
    signature = sign_webhook(SIGNING_KEY, "1700000000", body)
    raise RuntimeError(f"the receiver's answer made no sense ({len(signature)} characters signed)")


async def test_an_error_next_to_a_signing_key_reaches_sentry_without_it(set_env, db) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET="consumer-test-secret")
    receive = create_queue_consumer(TOPIC, deliver_then_fail, ConsumerOptions(max_attempts=3), module_file=__file__)
    app = function_app(route(PATH, POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
    with sentry_sink() as sink, embedded_queue(set_env) as queue:
        set_env(SENTRY_DSN=sink.dsn)
        await publish_message(TOPIC, rss_message(PAYLOAD_MARK))  # the batch id: only a payload holds it
        [response] = await queue.push(wire_topic(TOPIC), app, PATH, CONSUMER)
        [payload] = queue.payloads(wire_topic(TOPIC))
        items = sink.items()
    events = [item for item in items if item.get("exception")]
    sent = json.dumps(items)
    message_signature = str(payload["signature"])
    webhook_signature = sign_webhook(SIGNING_KEY, "1700000000", json.dumps(payload).encode())
    leaked = [
        name
        for name, value in {
            "the signing key": SIGNING_KEY,
            "the webhook signature": webhook_signature.removeprefix("sha256="),
            "the message's signature": message_signature,
            "the payload": PAYLOAD_MARK,
        }.items()
        if value in sent
    ]
    case = "a consumer's failure beside a signing key, a signature and a payload (values looked for)"
    record("error reports", case, tried=4, bad=len(leaked))
    assert response.status_code == 200  # answered: the failure is the consumer's to retry
    assert events and "the receiver's answer made no sense" in sent  # the error itself is reported
    assert events[0]["exception"]["values"][-1]["stacktrace"]["frames"]  # with where it happened
    assert leaked == []
