"""``GET /api/admin/queues`` (surface ``queues``): queue health from real measurements.

The spec's page derived four "queues" from the story feed with hard-coded zeroes. This answers
what the bundle can actually count:

- ``pipeline``: each RSS topic's dead letters (count, last failure) from ``queue_dead_letters``,
  and the latest dead letters with their errors; plus the flag and provisioning state;
- ``aiLedgerRetry``: the lengths of the three Redis lists (``null`` without Redis);
- ``meteringOutbox``: outbox rows by status, and how many have exhausted their attempts;
- ``topics``: per RSS topic, the consumer wrapper's own telemetry (``lib.queues.telemetry``):
  published, deliveries, successes, retries, dead letters, rejected, last success, last
  failure and its error, and the age of the last message delivered.

The queue service itself exposes no depth or retry counts, so none are invented here.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.platform.ai_ledger_retry import DLQ_KEY, PROCESSING_KEY, QUEUE_KEY
from lib.platform.flags import is_feature_enabled
from lib.queues.client import get_queue_region, is_queues_provisioned
from lib.queues.dead_letters import dead_letter_summary
from lib.queues.telemetry import EMPTY_TELEMETRY, read_topic_telemetry
from lib.queues.topics import RSS_QUEUE_TOPICS, dlq_topic, wire_topic
from lib.redis.client import get_redis
from lib.redis.commands import execute_pipeline

ai_usage = lazy_import("lib.platform.ai_usage")


async def _ledger_retry_lengths() -> dict[str, int] | None:
    client = get_redis()
    if client is None:
        return None
    queued, processing, dead = await execute_pipeline(
        client, [("LLEN", QUEUE_KEY), ("LLEN", PROCESSING_KEY), ("LLEN", DLQ_KEY)]
    )
    return {"queued": int(queued), "processing": int(processing), "deadLettered": int(dead)}


async def _metering_outbox() -> dict[str, int]:
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT status, count(*) AS count, count(*) FILTER (WHERE attempt_count >= %s) AS exhausted"
            " FROM ai_usage_metering_outbox GROUP BY status",
            (ai_usage.MAX_AI_METERING_ATTEMPTS,),
        )
        rows = await cursor.fetchall()
    counts = {"pending": 0, "processed": 0, "failed": 0, "exhausted": 0}
    for row in rows:
        counts[row["status"]] = row["count"]
        counts["exhausted"] += row["exhausted"] if row["status"] == "failed" else 0
    return counts


async def _topic_telemetry() -> list[dict[str, Any]]:
    counted = await read_topic_telemetry()
    return [
        {"topic": logical, "wireTopic": wire_topic(logical), **(counted.get(logical) or EMPTY_TELEMETRY)}
        for logical in RSS_QUEUE_TOPICS.values()
    ]


async def read_queue_health(_request: Request) -> Response:
    dead = await dead_letter_summary()
    by_topic = {row["topic"]: row for row in dead["perTopic"]}
    topics: list[dict[str, Any]] = []
    for logical in RSS_QUEUE_TOPICS.values():
        row = by_topic.get(logical)
        topics.append(
            {
                "topic": logical,
                "wireTopic": wire_topic(logical),
                "deadLetterTopic": dlq_topic(logical),
                "deadLetters": row["count"] if row else 0,
                "lastDeadLetterAt": iso_timestamp(row["last_failed_at"]) if row else None,
            }
        )
    body = {
        "pipeline": {
            "enabled": await is_feature_enabled("rssQueuePipeline"),
            "provisioned": is_queues_provisioned(),
            "region": get_queue_region(),
            "topics": topics,
            "latestDeadLetters": [
                {
                    "id": row["id"],
                    "topic": row["topic"],
                    "originalMessageId": row["original_message_id"],
                    "deliveryCount": row["delivery_count"],
                    "errorMessage": row["error_message"],
                    "failedAt": iso_timestamp(row["failed_at"]),
                }
                for row in dead["latest"]
            ],
        },
        "aiLedgerRetry": await _ledger_retry_lengths(),
        "meteringOutbox": await _metering_outbox(),
        "topics": await _topic_telemetry(),
        "measuredAt": iso_timestamp(),
    }
    return JSONResponse(body)
