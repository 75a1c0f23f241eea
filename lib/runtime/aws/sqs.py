"""An SQS consumer Lambda: one event (a batch of up to 10 records of one topic's queue) through
the topic's ``QueueConsumer``.

The model on SQS. A received message is invisible for the queue's visibility timeout (300 s,
the consumer's lease); Lambda deletes the records the function reports as done and leaves the
others, which come back when their visibility ends. So, per record, from
``QueueConsumer.deliver``'s result:

- done (ran, already ran, or rejected as forged/expired) → not reported: Lambda deletes it;
- retry → ``ChangeMessageVisibility`` to ``min(300, 2 ** receiveCount)`` s (the spec's backoff)
  and reported in ``batchItemFailures`` — only that record comes back, not its whole batch;
- the last attempt failed (``receiveCount`` = 5) → recorded in ``queue_dead_letters`` as on
  Vercel, made visible at once and reported: the queue's own redrive policy
  (``maxReceiveCount: 5``) moves it to the topic's DLQ queue instead of delivering it a sixth
  time. (On Vercel the consumer sends the ``-dlq`` message itself; here SQS does.)

A record that raises anywhere is reported too: nothing is acknowledged that was not processed.
The delivery count is SQS's ``ApproximateReceiveCount``, the message age its ``SentTimestamp``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from lib.observability import log_server_error
from lib.queues.consumer import Delivery, DeliveryResult, QueueConsumer
from lib.queues.transport import sqs_client, sqs_queue_url


def delivery_from_record(record: dict[str, Any]) -> Delivery:
    attributes = record.get("attributes") or {}
    try:
        payload: Any = json.loads(record.get("body") or "")
    except ValueError:
        payload = record.get("body")  # not JSON: not a message we signed; the consumer rejects it
    sent_ms = attributes.get("SentTimestamp")
    return Delivery(
        payload,
        str(record["messageId"]),
        int(attributes.get("ApproximateReceiveCount") or 1),
        datetime.fromtimestamp(int(sent_ms) / 1000, UTC) if sent_ms else None,
    )


async def _set_visibility(topic: str, receipt_handle: str, seconds: int) -> None:
    await asyncio.to_thread(
        sqs_client().change_message_visibility,
        QueueUrl=sqs_queue_url(topic),
        ReceiptHandle=receipt_handle,
        VisibilityTimeout=seconds,
    )


async def _handle_record(consumer: QueueConsumer, record: dict[str, Any]) -> bool:
    """True when the record is done (Lambda may delete it)."""
    result: DeliveryResult = await consumer.deliver(delivery_from_record(record))
    if result.retry_after_seconds is not None:
        await _set_visibility(consumer.topic, record["receiptHandle"], result.retry_after_seconds)
        return False
    if result.dead_letter is not None:
        await _set_visibility(consumer.topic, record["receiptHandle"], 0)  # to the DLQ on its next receive
        return False
    return True


async def handle_sqs_event(consumer: QueueConsumer, event: dict[str, Any]) -> dict[str, Any]:
    """The Lambda answer for an SQS event: ``{"batchItemFailures": [{"itemIdentifier": id}]}``."""
    failures = []
    for record in event.get("Records") or []:
        try:
            done = await _handle_record(consumer, record)
        except Exception as error:  # noqa: BLE001 - reported as failed: SQS delivers it again
            log_server_error(f"queues:{consumer.topic}", error, messageId=record.get("messageId"))
            done = False
        if not done:
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}
