"""Queue telemetry (issue 11): per topic, what the consumers and publishers actually did.

Counters: ``published`` (messages sent to the topic), ``deliveries`` (pushes the consumer
handled), and of those ``successes`` (acknowledged after the handler ran, or a batch that had
already run), ``retries`` (the handler failed; the message comes back later), ``deadLetters``
(the last attempt failed), ``rejected`` (forged, expired or old-format messages); plus the last
success, the last failure with its error, and the **delivery age** — how old the last message
delivered was. Vercel's queue API has no depth or oldest-message query (send, receive,
acknowledge, extend and retry-after are all it offers), but every delivery carries its message's
``createdAt``, so the age at delivery is the lag a backlog would show.

Each delivery costs one statement: an upsert into one of ``SHARDS`` rows of its topic (chosen
at random, so concurrent deliveries do not serialise on one row lock), and a dead-lettered
delivery writes its ``queue_dead_letters`` row in the same statement. Readers sum the shards.
Telemetry is best effort: a write that fails is logged and never fails the delivery.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any, Literal

from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.observability import log_server_error

SHARDS = 8
ERROR_CHARS = 500

DeliveryOutcome = Literal["succeeded", "retried", "dead_lettered", "rejected", "held"]

_UPSERT = """
INSERT INTO queue_topic_telemetry AS t (topic, shard, deliveries, successes, retries, dead_letters, rejected,
    last_success_at, last_failure_at, last_error, last_delivery_at, last_delivery_age_ms)
VALUES (%(topic)s, %(shard)s, 1, %(succeeded)s, %(retried)s, %(dead)s, %(rejected)s,
    CASE WHEN %(succeeded)s = 1 THEN now() END, CASE WHEN %(failed)s THEN now() END, %(error)s,
    now(), %(age_ms)s)
ON CONFLICT (topic, shard) DO UPDATE SET
    deliveries = t.deliveries + 1,
    successes = t.successes + EXCLUDED.successes,
    retries = t.retries + EXCLUDED.retries,
    dead_letters = t.dead_letters + EXCLUDED.dead_letters,
    rejected = t.rejected + EXCLUDED.rejected,
    last_success_at = COALESCE(EXCLUDED.last_success_at, t.last_success_at),
    last_failure_at = COALESCE(EXCLUDED.last_failure_at, t.last_failure_at),
    last_error = CASE WHEN EXCLUDED.last_failure_at IS NULL THEN t.last_error ELSE EXCLUDED.last_error END,
    last_delivery_at = EXCLUDED.last_delivery_at,
    last_delivery_age_ms = EXCLUDED.last_delivery_age_ms
"""


def _age_ms(created_at: datetime | None) -> int | None:
    if created_at is None:
        return None
    if created_at.tzinfo is None:
        created_at = created_at.replace(tzinfo=UTC)
    return max(0, round((datetime.now(UTC) - created_at).total_seconds() * 1000))


async def record_delivery(
    topic: str,
    outcome: DeliveryOutcome,
    *,
    created_at: datetime | None = None,
    error: str | None = None,
    with_insert: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Count one delivery of ``topic`` in one statement. ``with_insert`` is an ``INSERT`` (SQL
    with named parameters) that belongs to the same delivery — its dead letter — and runs in
    the same statement."""
    params: dict[str, Any] = {
        "topic": topic,
        "shard": random.randrange(SHARDS),  # noqa: S311 - spreading row locks, not security
        "succeeded": int(outcome == "succeeded"),
        "retried": int(outcome == "retried"),
        "dead": int(outcome == "dead_lettered"),
        "rejected": int(outcome == "rejected"),
        "failed": error is not None,
        "error": error[:ERROR_CHARS] if error else None,
        "age_ms": _age_ms(created_at),
    }
    sql = _UPSERT
    if with_insert is not None:
        sql = f"WITH delivery_insert AS ({with_insert[0]}) {_UPSERT}"
        params |= with_insert[1]
    try:
        async with connection() as conn:
            await conn.execute(sql, params)
    except Exception as failure:  # noqa: BLE001 - counting must never fail a delivery
        log_server_error(f"queues:{topic}:telemetry", failure, outcome=outcome)


async def record_published(topic: str, count: int = 1) -> None:
    try:
        async with connection() as conn:
            await conn.execute(
                "INSERT INTO queue_topic_telemetry AS t (topic, shard, published) VALUES (%s, %s, %s)"
                " ON CONFLICT (topic, shard) DO UPDATE SET published = t.published + EXCLUDED.published",
                (topic, random.randrange(SHARDS), count),  # noqa: S311 - spreading row locks
            )
    except Exception as failure:  # noqa: BLE001 - the message is sent; only the count is lost
        log_server_error(f"queues:{topic}:telemetry", failure)


EMPTY_TELEMETRY: dict[str, Any] = {
    "published": 0,
    "deliveries": 0,
    "successes": 0,
    "retries": 0,
    "deadLetters": 0,
    "rejected": 0,
    "lastSuccessAt": None,
    "lastFailureAt": None,
    "lastError": None,
    "lastDeliveryAgeMs": None,
}


async def read_topic_telemetry() -> dict[str, dict[str, Any]]:
    """topic → its counters, summed over the shards."""
    async with connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT topic, sum(published) AS published, sum(deliveries) AS deliveries,"
                " sum(successes) AS successes, sum(retries) AS retries, sum(dead_letters) AS dead_letters,"
                " sum(rejected) AS rejected, max(last_success_at) AS last_success_at,"
                " max(last_failure_at) AS last_failure_at,"
                " (array_agg(last_error ORDER BY last_failure_at DESC NULLS LAST))[1] AS last_error,"
                " (array_agg(last_delivery_age_ms ORDER BY last_delivery_at DESC NULLS LAST))[1] AS age_ms"
                " FROM queue_topic_telemetry GROUP BY topic"
            )
        ).fetchall()
    return {
        row["topic"]: {
            "published": int(row["published"]),
            "deliveries": int(row["deliveries"]),
            "successes": int(row["successes"]),
            "retries": int(row["retries"]),
            "deadLetters": int(row["dead_letters"]),
            "rejected": int(row["rejected"]),
            "lastSuccessAt": iso_timestamp(row["last_success_at"]) if row["last_success_at"] else None,
            "lastFailureAt": iso_timestamp(row["last_failure_at"]) if row["last_failure_at"] else None,
            "lastError": row["last_error"],
            "lastDeliveryAgeMs": row["age_ms"],
        }
        for row in rows
    }
