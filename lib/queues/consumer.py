"""The consumer wrapper (spec: ``createRssConsumer``): what each consumer route serves.

A push delivery is a POST whose body is the message and whose ``ce-*`` headers are the
CloudEvent metadata. The route hands both to ``vercel-queue``'s ``accept_and_handle``, which
leases the message and calls the subscriber registered here for the topic. The subscriber:

1. verifies the message (``signing.message_rejection``): a forged, expired or old-format
   message is logged (``log_server_error`` with the reason, message id and delivery count) and
   acknowledged — retrying it is pointless and would only mirror attacker payloads into the DLQ;
2. checks it against its topic's contract (``lib.contracts.queue_messages``): a message that
   verifies but does not match is dead-lettered at once, with the fields at fault as the reason
   the operators' queue view shows (retrying cannot fix it);
3. claims the batch (``claims``) before running it: a batch that already ran is acknowledged
   without work; one that another delivery is running now comes back when that lease ends
   (``RetryAfter``, not counted as a failure) — so duplicates and replays do the work once,
   while a redelivery after a failure runs again;
4. runs the handler; an error releases the claim, is logged, and the message is retried after
   ``min(300, 2 ** delivery_count)`` seconds (``RetryAfter``) — or, on the last of
   ``max_attempts`` deliveries, mirrored to ``<topic>-dlq`` (the send awaited, so the record
   cannot die with the instance), recorded in ``queue_dead_letters`` for the operators'
   queue view, and then acknowledged.

Every delivery's outcome is counted in ``telemetry`` with one statement (the dead letter's row
is written by that same statement).

Steps 1 to 4 are ``QueueConsumer.deliver``, which knows no transport: it takes a ``Delivery`` and
answers a ``DeliveryResult`` (acknowledge, or come back after N seconds). The Vercel push route
turns that into the SDK's ``RetryAfter``; the SQS Lambda (``lib.runtime.aws.sqs``) into
``ChangeMessageVisibility`` and ``batchItemFailures``.

Each consumer subscribes under the consumer name Vercel gives its function
(``consumer_names``); a push naming another consumer is answered 400 ``consumer_mismatch`` and
logged, so a misnamed trigger surfaces instead of being dropped.

The handler is also registered in-process, so local development without a queue runs the
same body (signature and batch checks included). Off the platform with no queue token, a push
cannot be acknowledged, and the route answers 204 without work; on Vercel without a token it
fails loudly (``QueueNotProvisioned``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.bundle import bundle_relative_path
from lib.clock import iso_timestamp
from lib.http.errors import error_response
from lib.http.routing import Handler
from lib.lazy_imports import lazy_import
from lib.observability import describe_error, log_server_error
from lib.queues.claims import BatchClaim, claim_batch, finish_batch
from lib.queues.client import queue_client, uses_queue_service
from lib.queues.consumer_names import vercel_consumer_name
from lib.queues.dead_letters import insert_dead_letter
from lib.queues.publish import MessageHandler, MessageMetadata, register_in_process_handler
from lib.queues.signing import message_rejection
from lib.queues.telemetry import record_delivery
from lib.queues.topics import dlq_topic, wire_topic

queue_messages = lazy_import("lib.contracts.queue_messages")
vercel_queue = lazy_import("vercel.queue")


MAX_RETRY_DELAY_SECONDS = 300


@dataclass(frozen=True)
class ConsumerOptions:
    visibility_timeout_seconds: int = 300
    max_attempts: int = 5


def retry_delay_seconds(delivery_count: int) -> int:
    return min(MAX_RETRY_DELAY_SECONDS, 2**delivery_count)


class BatchHeldElsewhere(Exception):
    """Another delivery holds this batch's claim; come back when its lease ends."""

    def __init__(self, claim: BatchClaim) -> None:
        super().__init__(f"batch {claim.batch_id} is running under another delivery")
        remaining = (claim.lease_until - datetime.now(UTC)).total_seconds() if claim.lease_until else 1
        self.retry_after_seconds = max(1, min(MAX_RETRY_DELAY_SECONDS, math.ceil(remaining)))


@dataclass(frozen=True)
class Delivery:
    """One delivery of a message, whatever carried it."""

    payload: Any
    message_id: str
    delivery_count: int
    created_at: datetime | None = None


@dataclass(frozen=True)
class DeliveryResult:
    """Acknowledge the message (no ``retry_after_seconds``), or let it come back after that
    many seconds. ``dead_letter`` is set when this was the last attempt and it failed."""

    retry_after_seconds: int | None = None
    dead_letter: dict[str, Any] | None = None


DeadLetterMirror = Callable[[dict[str, Any]], Awaitable[None]]


class QueueConsumer:
    """One per (topic, consumer name) per process; re-creating a consumer (a module loaded
    twice) swaps the handler instead of registering a second, overlapping subscription."""

    def __init__(self, topic: str, name: str, handler: MessageHandler, options: ConsumerOptions) -> None:
        self.topic, self.name, self.handler, self.options = topic, name, handler, options
        # The SDK holds subscribers weakly; this reference keeps ours registered.
        self.subscriber: Any = None

    def subscribe_to_vercel_queue(self) -> None:
        """Register with the queue SDK, once, at the first push delivery rather than at import:
        the SDK is loaded only by a function that receives from Vercel's queue (lib.lazy_imports)."""
        if self.subscriber is not None:
            return

        # The SDK reads this annotation (typing.get_type_hints) to decode the message: it must
        # resolve at run time, so it names the SDK's class through the stand-in.
        async def deliver(message: vercel_queue.Message[dict[str, object]]) -> None:
            await self.on_vercel_delivery(message)

        deliver.__name__ = f"deliver_{self.name}"
        # Already Vercel's name: a plain str would be sanitised again (every "_" doubled).
        self.subscriber = vercel_queue.subscribe(
            deliver, topic=wire_topic(self.topic), consumer_group=vercel_queue.SanitizedName(self.name)
        )

    async def process(self, payload: Any, metadata: MessageMetadata) -> str | None:
        """Verify, claim and run once per batch; returns why the message was rejected, if it was."""
        context = f"queues:{self.topic}"
        rejection = message_rejection(payload)
        if rejection is not None:
            log_server_error(
                context,
                f"rejected a message: {rejection}",
                messageId=metadata.message_id,
                deliveryCount=metadata.delivery_count,
            )
            return rejection
        queue_messages.check_message(queue_messages.QUEUE_MESSAGES[self.topic], payload)
        batch_id = str(payload.get("batchId") or "")
        if not batch_id:
            await self.handler(payload, metadata)
            return None
        claim = await claim_batch(self.topic, batch_id, self.options.visibility_timeout_seconds)
        if claim.state == "done":
            sys.stderr.write(f"[{context}] batch={batch_id} already ran; acknowledged without work\n")
            return None
        if claim.state == "held":
            raise BatchHeldElsewhere(claim)
        try:
            await self.handler(payload, metadata)
        except BaseException:
            await _release(claim)
            raise
        await finish_batch(claim, succeeded=True)
        return None

    async def deliver(self, delivery: Delivery, mirror_dead_letter: DeadLetterMirror | None = None) -> DeliveryResult:
        """Run one delivery through verify → claim → handler and count it; the result says
        whether the transport acknowledges it or lets it come back. On the last attempt the dead
        letter is passed to ``mirror_dead_letter`` (Vercel's ``-dlq`` topic; SQS's redrive
        policy needs none) and then recorded in ``queue_dead_letters``."""
        metadata = MessageMetadata(delivery.message_id, self.topic, delivery.delivery_count)
        created_at = delivery.created_at
        try:
            rejection = await self.process(delivery.payload, metadata)
        except BatchHeldElsewhere as held:
            await record_delivery(self.topic, "held", created_at=created_at)
            return DeliveryResult(retry_after_seconds=held.retry_after_seconds)
        except queue_messages.InvalidMessage as invalid:  # retrying cannot fix it: dead-lettered at once
            log_server_error(f"queues:{self.topic}", invalid, messageId=metadata.message_id)
            return await self._dead_letter(delivery, str(invalid), mirror_dead_letter)
        except Exception as error:  # noqa: BLE001 - any handler failure is retried, then dead-lettered
            log_server_error(
                f"queues:{self.topic}", error, messageId=metadata.message_id, deliveryCount=metadata.delivery_count
            )
            described = describe_error(error)
            if metadata.delivery_count < self.options.max_attempts:
                await record_delivery(
                    self.topic,
                    "retried",
                    created_at=created_at,
                    error=described[: queue_messages.DLQ_ERROR_MESSAGE_CHARS],
                )
                return DeliveryResult(retry_after_seconds=retry_delay_seconds(metadata.delivery_count))
            return await self._dead_letter(delivery, described, mirror_dead_letter)
        if rejection is None:
            await record_delivery(self.topic, "succeeded", created_at=created_at)
        else:
            await record_delivery(self.topic, "rejected", created_at=created_at, error=f"rejected: {rejection}")
        return DeliveryResult()

    async def _dead_letter(
        self, delivery: Delivery, reason: str, mirror_dead_letter: DeadLetterMirror | None
    ) -> DeliveryResult:
        """The message's summary to ``mirror_dead_letter`` (awaited), then its row in
        ``queue_dead_letters`` with the reason the console shows; the message is acknowledged."""
        dead_letter = {
            "originalMessageId": delivery.message_id,
            "originalTopic": self.topic,
            "deliveryCount": delivery.delivery_count,
            "failedAt": iso_timestamp(),
            "errorMessage": reason[: queue_messages.DLQ_ERROR_MESSAGE_CHARS],
        }
        queue_messages.check_message(queue_messages.DeadLetterMessage, dead_letter)
        if mirror_dead_letter is not None:
            await mirror_dead_letter(dead_letter)
        await record_delivery(
            self.topic,
            "dead_lettered",
            created_at=delivery.created_at,
            error=dead_letter["errorMessage"],
            with_insert=insert_dead_letter(dead_letter, delivery.payload),
        )
        return DeliveryResult(dead_letter=dead_letter)

    async def on_vercel_delivery(self, message: vercel_queue.Message[dict[str, object]]) -> None:
        """The SDK's subscriber: a result to retry becomes the SDK's ``RetryAfter``; a dead
        letter is mirrored to the ``-dlq`` topic (the send awaited, so the record cannot die
        with the instance) and the message acknowledged."""
        delivery = Delivery(
            message.payload,
            str(message.metadata.message_id),
            int(message.metadata.delivery_count),
            message.metadata.created_at,
        )

        async def send_to_dlq_topic(dead_letter: dict[str, Any]) -> None:
            await queue_client().send(dlq_topic(self.topic), dead_letter)

        result = await self.deliver(delivery, send_to_dlq_topic)
        if result.retry_after_seconds is not None:
            raise vercel_queue.RetryAfter(result.retry_after_seconds)


async def _release(claim: BatchClaim) -> None:
    # If the database is down too, the lease simply expires and the batch becomes claimable.
    try:
        await finish_batch(claim, succeeded=False)
    except Exception as error:  # noqa: BLE001 - the handler's own error is the one to report
        log_server_error("queues:claims", error, batchId=claim.batch_id)


_consumers: dict[tuple[str, str], QueueConsumer] = {}


def _consumer_for(topic: str, name: str, handler: MessageHandler, options: ConsumerOptions) -> QueueConsumer:
    existing = _consumers.get((topic, name))
    if existing is not None:
        existing.handler, existing.options = handler, options
        return existing
    consumer = QueueConsumer(topic, name, handler, options)
    _consumers[(topic, name)] = consumer
    return consumer


def create_queue_consumer(
    topic: str, handler: MessageHandler, options: ConsumerOptions | None = None, *, module_file: str
) -> Handler:
    """The POST endpoint for ``topic``'s consumer route, served by the function ``module_file``
    (the ``api/`` file's ``__file__``), whose consumer name Vercel derives from its path."""
    consumer = _consumer_for(
        topic, vercel_consumer_name(bundle_relative_path(module_file)), handler, options or ConsumerOptions()
    )

    async def in_process(payload: dict[str, Any], metadata: MessageMetadata) -> None:
        await consumer.process(payload, metadata)

    register_in_process_handler(topic, in_process)
    expected_topic = wire_topic(topic)

    async def receive_push(request: Request) -> Response:
        if not uses_queue_service():
            return Response(status_code=204)
        if request.headers.get("ce-vqsqueuename") != expected_topic:
            return error_response(400, "malformed_delivery", f"Not a push delivery for {expected_topic}.")
        pushed_consumer = (request.headers.get("ce-vqsconsumergroup") or "")[:200]
        if pushed_consumer and pushed_consumer != consumer.name:
            mismatch = (
                f"This function consumes {expected_topic} as {consumer.name}; the delivery names {pushed_consumer}."
            )
            log_server_error(f"queues:{topic}", f"push for another consumer: {mismatch}")
            return error_response(400, "consumer_mismatch", mismatch)
        body = await request.body()
        consumer.subscribe_to_vercel_queue()
        try:
            await queue_client().accept_and_handle(
                body, dict(request.headers), lease_duration=consumer.options.visibility_timeout_seconds
            )
        except (vercel_queue.QueueError, ValueError) as error:
            log_server_error(f"queues:{topic}", error)
            return error_response(400, "malformed_delivery", "The push delivery could not be accepted.")
        return JSONResponse({"acknowledged": True})

    return receive_push


def registered_consumers() -> list[QueueConsumer]:
    """Every consumer the ``api/`` modules loaded in this process created — how another
    transport's entry point (``lib.runtime.aws.entry``) reaches the same consumers."""
    return list(_consumers.values())
