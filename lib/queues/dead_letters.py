"""The dead letters the consumers wrote, kept in Postgres too (``queue_dead_letters``): the
queue service's ``-dlq`` topics cannot be listed, so this is what the operators' queue view
reads. Recording is best effort — the ``-dlq`` message was already sent — and a failure to
record is reported, never raised."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from lib.db.pool import connection
from lib.observability import log_server_error


async def record_dead_letter(dead_letter: dict[str, Any], payload: Any) -> None:
    try:
        async with connection() as conn:
            await conn.execute(
                "INSERT INTO queue_dead_letters (topic, original_message_id, delivery_count, error_message, payload)"
                " VALUES (%s, %s, %s, %s, %s)",
                (
                    dead_letter["originalTopic"],
                    dead_letter["originalMessageId"],
                    dead_letter["deliveryCount"],
                    dead_letter["errorMessage"],
                    Jsonb(payload),
                ),
            )
    except Exception as error:  # noqa: BLE001 - the DLQ topic has the record; this copy is for viewing
        log_server_error("queues:dead-letter-record", error, messageId=dead_letter["originalMessageId"])


async def dead_letter_summary(limit: int = 50) -> dict[str, Any]:
    async with connection() as conn:
        per_topic = await (
            await conn.execute(
                "SELECT topic, count(*) AS count, max(failed_at) AS last_failed_at"
                " FROM queue_dead_letters GROUP BY topic"
            )
        ).fetchall()
        latest = await (
            await conn.execute(
                "SELECT id, topic, original_message_id, delivery_count, error_message, failed_at"
                " FROM queue_dead_letters ORDER BY failed_at DESC, id DESC LIMIT %s",
                (limit,),
            )
        ).fetchall()
    return {"perTopic": per_topic, "latest": latest}
