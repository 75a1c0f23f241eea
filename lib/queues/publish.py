"""Publishing signed messages (spec: ``publishRssMessage``, ``publishRssAggregationRefresh``).

With a transport (``lib.queues.transport``: Vercel Queues when provisioned or on Vercel, or
SQS): sent to the topic with the spec's idempotency key
``<topic>:<batchId>:<first 96 characters of the JSON, non-alphanumerics as _>``. A transport
that cannot send raises — never an in-process fallthrough, because on serverless a detached
in-process run can die with the response and turn "publish failed" into "maybe ran".

Not provisioned off the platform (local development without a queue): the message goes straight to the handler
registered for the topic (consumer modules register theirs at import), with synthetic
metadata; with no handler registered it is dropped with a stderr line.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from lib.clock import iso_timestamp
from lib.contracts.json_stringify import json_stringify
from lib.lazy_imports import lazy_import
from lib.queues.signing import sign_message
from lib.queues.telemetry import record_published
from lib.queues.topics import RSS_QUEUE_TOPICS
from lib.queues.transport import queue_transport

queue_messages = lazy_import("lib.contracts.queue_messages")


@dataclass(frozen=True)
class MessageMetadata:
    message_id: str
    topic: str
    delivery_count: int


MessageHandler = Callable[[dict[str, Any], MessageMetadata], Awaitable[None]]
_in_process_handlers: dict[str, MessageHandler] = {}
_NON_ALPHANUMERIC = re.compile(r"[^A-Za-z0-9]")


def register_in_process_handler(topic: str, handler: MessageHandler) -> None:
    _in_process_handlers[topic] = handler


def idempotency_key(topic: str, message: dict[str, Any]) -> str:
    """The spec's key, as the TypeScript producer computes it: the first 96 UTF-16 code units
    of ``JSON.stringify(message)`` with every code unit that is not ASCII alphanumeric as ``_``
    (an astral character is two)."""
    serialized = _NON_ALPHANUMERIC.sub(lambda m: "_" * (2 if ord(m[0]) > 0xFFFF else 1), json_stringify(message))
    return f"{topic}:{message.get('batchId', '')}:{serialized[:96]}"


PublishOutcome = Literal["queued", "dispatched", "dropped"]


async def publish_message(
    topic: str, message: dict[str, Any], *, key: str | None = None, delay_seconds: int = 0
) -> PublishOutcome:
    """Sign, check against the topic's contract (``InvalidMessage`` names the fields at fault),
    and publish: ``queued`` on the queue service, ``dispatched`` to the in-process
    handler, or ``dropped`` (not provisioned, no handler registered). ``key`` replaces the
    spec's idempotency key (a redrive must not be deduplicated against the original send).
    ``delay_seconds``: the message becomes visible that much later (on a transport only: the
    in-process path runs it now, so a caller with a later time must not publish in-process)."""
    signed = sign_message(message)
    contract = queue_messages.QUEUE_MESSAGES.get(topic)
    if contract is None:
        raise queue_messages.InvalidMessage(f"{topic!r} is not a queue topic with a contract")
    queue_messages.check_message(contract, signed)
    transport = queue_transport()
    if transport is not None:
        await transport.send(
            topic, signed, idempotency_key=key or idempotency_key(topic, signed), delay_seconds=delay_seconds
        )
        await record_published(topic)
        return "queued"
    handler = _in_process_handlers.get(topic)
    if handler is None:
        sys.stderr.write(f"[queues:{topic}] no queue provisioned and no in-process handler; message dropped\n")
        return "dropped"
    await record_published(topic)
    await handler(signed, MessageMetadata(f"in-process-{uuid.uuid4()}", topic, 1))
    return "dispatched"


async def publish_rss_aggregation_refresh() -> str | None:
    """One ``rss.ingest`` message per refresh: the whole catalog is one build (cross-source
    clustering), so the stage is a single full-refresh trigger, not a fan-out. Returns the
    batch id, or ``None`` when the message was dropped."""
    message = {
        "batchId": str(uuid.uuid4()),
        "sourceId": "all-sources",
        "feedUrl": "",
        "requestedAt": iso_timestamp(),
    }
    outcome = await publish_message(RSS_QUEUE_TOPICS["ingest"], message)
    return None if outcome == "dropped" else message["batchId"]
