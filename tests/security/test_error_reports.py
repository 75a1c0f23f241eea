"""What an error report carries out of the process (``lib.observability``): a queue consumer's
handler fails while a tenant's webhook signing key, the signature it made and the message's
payload and signature are in scope — the kind of failure every consumer reports — and the real
webhook delivery fails after it signed and posted an alert to an endpoint whose URL holds a
token. The event the Sentry SDK sends to its DSN (a real HTTP receiver on loopback)
names the error and where it happened, and holds none of them: no frame's local variables."""

from __future__ import annotations

import json
import secrets

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.bundle import bundle_relative_path
from lib.db.state_store import set_state
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.platform.alerts.evaluation import on_new_stories_synchronized
from lib.platform.alerts.rules import rules_key
from lib.platform.alerts.webhooks import sign_webhook, webhook_key_name
from lib.queues.consumer import ConsumerOptions, create_queue_consumer
from lib.queues.consumer_names import vercel_consumer_name
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.topics import wire_topic
from tests.queues.test_consumer import PATH, TOPIC
from tests.support.db import table_refusing
from tests.support.env import allow_egress
from tests.support.functions import OPEN, client_for
from tests.support.outbound import Counting
from tests.support.queue import embedded_queue, rss_message
from tests.support.security import record
from tests.support.sentry import sentry_sink
from tests.support.servers import serve_in_thread

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


async def test_a_webhook_delivery_that_fails_reaches_sentry_without_its_secrets(set_env, db, redis) -> None:
    """The real delivery: a rule's alert is signed with the tenant's key and posted to a receiver
    whose URL holds a token, then recording the attempt fails (the log refuses the row), with the
    payload and the endpoint in scope. The event names the failure, and holds none of them."""
    receiver, token = Counting(), "hook-token-" + secrets.token_hex(8)
    with serve_in_thread(receiver.app) as url, sentry_sink() as sink:
        allow_egress(set_env, url)
        set_env(SENTRY_DSN=sink.dsn)
        await set_state(webhook_key_name("org_err"), SIGNING_KEY)
        await set_state(rules_key("org_err"), [{"id": "hook", "keywords": ["frog"], "channel": "webhook",
                                                "endpoint": f"{url}/hooks/{token}?k=1"}])  # fmt: skip
        stories = [{"id": "s-err", "headline": f"Frog {PAYLOAD_MARK}", "summary": "A new frog."}]

        async def sync_stories(_request: Request) -> Response:  # as the tick does, after its answer
            on_new_stories_synchronized("org_err", stories)
            return JSONResponse({"synchronized": True})

        app = function_app(route("/sync", POST=guarded(OPEN, sync_stories)))
        async with table_refusing(db, "delivery_logs", "INSERT"), client_for(app) as client:
            assert (await client.post("/sync")).status_code == 200
        items = sink.items()
    [posted] = receiver.requests
    sent = json.dumps(items)
    leaked = [
        name
        for name, value in {
            "the signing key": SIGNING_KEY,
            "the webhook signature": posted["x-ermis-signature"].removeprefix("sha256="),
            "the payload": PAYLOAD_MARK,
            "the endpoint's token": token,
        }.items()
        if value in sent
    ]
    record("error reports", "a webhook delivery's failure after signing and posting (values looked for)",
           tried=4, bad=len(leaked))  # fmt: skip
    assert [item for item in items if item.get("exception")] and "read-only today" in sent  # reported
    assert leaked == []
