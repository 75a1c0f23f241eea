"""Queue transports: the one seam between the pipeline and the service that carries it (issue 12).

A message may be sent with a delay (``delay_seconds``): Vercel Queues holds it up to its
retention, SQS up to ``SQS_MAX_DELAY_SECONDS``.

Everything above the seam — signing, replay defence, the batch claim, the handler, the dead-letter
record in Postgres, telemetry — is the same on every transport. A transport only *sends* a
signed message to a topic; deliveries come back through the transport's own entry point (Vercel
pushes to the consumer route, ``lib.queues.consumer``; SQS invokes the consumer Lambda,
``lib.runtime.aws.sqs``), and both hand them to the same ``QueueConsumer.deliver``.

``ERMIS_QUEUE_TRANSPORT`` chooses:

- ``vercel`` (default): Vercel Queues through the SDK, when provisioned or on Vercel
  (``lib.queues.client``); otherwise no transport at all, and messages run in-process (local
  development without a queue);
- ``sqs``: Amazon SQS through ``boto3`` (in a worker thread: boto3 is synchronous), one queue per
  topic at ``ERMIS_SQS_QUEUE_URL_<WIRE TOPIC>`` (``ERMIS_SQS_QUEUE_URL_RSS_INGEST``). A topic
  without its variable fails loudly at publish, naming the variable — never an in-process run.
  The endpoint and region come from boto3's own configuration (``AWS_REGION``,
  ``AWS_ENDPOINT_URL``), which Lambda sets and tests point at moto.
"""

from __future__ import annotations

import asyncio
import json
from functools import lru_cache
from typing import Any, Protocol

from lib.lazy_imports import lazy_import
from lib.queues.client import QueueNotProvisioned, queue_client, uses_queue_service
from lib.queues.topics import wire_topic
from lib.settings import get_settings

# SQS delays a message by at most 15 minutes; a longer delay is the sender's to split
# (a webhook wake-up that arrives early sends the next one).
SQS_MAX_DELAY_SECONDS = 900
# Only the SQS transport needs boto3; Lambda's runtime provides it.
boto3 = lazy_import("boto3")


class QueueTransport(Protocol):
    name: str

    async def send(
        self, topic: str, message: dict[str, Any], *, idempotency_key: str, delay_seconds: int = 0
    ) -> None: ...


class VercelQueueTransport:
    name = "vercel"

    async def send(self, topic: str, message: dict[str, Any], *, idempotency_key: str, delay_seconds: int = 0) -> None:
        await queue_client().send(
            wire_topic(topic), message, idempotency_key=idempotency_key, delay=delay_seconds or None
        )


@lru_cache(maxsize=1)
def sqs_client() -> Any:
    return boto3.client("sqs")


def sqs_queue_url(topic: str) -> str:
    wire = wire_topic(topic)
    url = get_settings().sqs_queue_url(wire)
    if url is None:
        variable = get_settings().sqs_queue_url_variable(wire)
        raise QueueNotProvisioned(f"{variable} is not set: the SQS transport has no queue for {topic}")
    return url


class SqsTransport:
    name = "sqs"

    async def send(self, topic: str, message: dict[str, Any], *, idempotency_key: str, delay_seconds: int = 0) -> None:
        # Standard queues do not deduplicate; duplicates are the batch claim's to absorb.
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        delay = min(delay_seconds, SQS_MAX_DELAY_SECONDS)
        await asyncio.to_thread(
            sqs_client().send_message, QueueUrl=sqs_queue_url(topic), MessageBody=body, DelaySeconds=delay
        )


def queue_transport() -> QueueTransport | None:
    """The configured transport, or ``None`` when messages run in-process (Vercel transport,
    off the platform, not provisioned)."""
    if get_settings().ermis_queue_transport == "sqs":
        return SqsTransport()
    return VercelQueueTransport() if uses_queue_service() else None
