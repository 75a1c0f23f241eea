"""Queue dead letters, kept in Postgres (``queue_dead_letters``) with the original message.

The queue service's ``-dlq`` topics cannot be listed, so the consumer wrapper records each
dead letter here too, in the same statement as its delivery's telemetry
(``insert_dead_letter``), after the ``-dlq`` send. This module is also the ``queue`` source of
stuck work (``lib.platform.stuck_work``) for the operations console:

- **redrive** publishes the original message again to its topic, signed anew, under the
  idempotency key ``<topic>:redrive:<id>`` (the spec's key would be deduplicated against the
  original send). The row is locked (``FOR UPDATE``) while the message is sent and marked
  ``redriven`` in the same transaction, so two concurrent redrives send it once: the second
  waits for the lock and then finds the row resolved. The batch claim of the original run was
  released when it failed, so the redriven message runs.
- **delete** marks the row ``deleted``. Rows acted on leave the list but stay, with who acted.
"""

from __future__ import annotations

from typing import Any

from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.observability import describe_error
from lib.platform.stuck_work import EntryOutcome, Position, StuckEntry, outcomes_in_order, row_ids
from lib.queues.publish import publish_message

psycopg_json = lazy_import("psycopg.types.json")

_INSERT = (
    "INSERT INTO queue_dead_letters (topic, original_message_id, delivery_count, error_message, payload)"
    " VALUES (%(dl_topic)s, %(dl_message_id)s, %(dl_delivery_count)s, %(dl_error)s, %(dl_payload)s)"
)


def insert_dead_letter(dead_letter: dict[str, Any], payload: Any) -> tuple[str, dict[str, Any]]:
    """The ``INSERT`` of one dead letter (the ``-dlq`` message's fields and the original
    message), as SQL and parameters for ``telemetry.record_delivery(with_insert=...)``."""
    return _INSERT, {
        "dl_topic": dead_letter["originalTopic"],
        "dl_message_id": dead_letter["originalMessageId"],
        "dl_delivery_count": dead_letter["deliveryCount"],
        "dl_error": dead_letter["errorMessage"],
        "dl_payload": psycopg_json.Jsonb(payload),
    }


async def dead_letter_summary(limit: int = 50) -> dict[str, Any]:
    """Open dead letters per topic (count, last failure), and the latest ones."""
    async with connection() as conn:
        per_topic = await (
            await conn.execute(
                "SELECT topic, count(*) AS count, max(failed_at) AS last_failed_at"
                " FROM queue_dead_letters WHERE resolution IS NULL GROUP BY topic"
            )
        ).fetchall()
        latest = await (
            await conn.execute(
                "SELECT id, topic, original_message_id, delivery_count, error_message, failed_at"
                " FROM queue_dead_letters WHERE resolution IS NULL ORDER BY failed_at DESC, id DESC LIMIT %s",
                (limit,),
            )
        ).fetchall()
    return {"perTopic": per_topic, "latest": latest}


class QueueDeadLetters:
    name = "queue"

    async def list_entries(self, limit: int, before: Position | None) -> list[StuckEntry]:
        after_clause, params = "", {"limit": limit}
        if before is not None and before[1].isdigit():
            after_clause = " AND (failed_at, id) < (%(at)s, %(id)s)"
            params |= {"at": before[0], "id": int(before[1])}
        async with connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT id, topic, original_message_id, delivery_count, error_message, payload, failed_at"
                    f" FROM queue_dead_letters WHERE resolution IS NULL{after_clause}"
                    " ORDER BY failed_at DESC, id DESC LIMIT %(limit)s",
                    params,
                )
            ).fetchall()
        return [
            StuckEntry(
                "queue",
                str(row["id"]),
                row["failed_at"],
                row["delivery_count"],
                row["error_message"],
                {"topic": row["topic"], "originalMessageId": row["original_message_id"], "message": row["payload"]},
            )
            for row in rows
        ]

    async def redrive(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        acted: dict[str, EntryOutcome] = {}
        async with connection() as conn, conn.transaction():
            rows = await (
                await conn.execute(
                    "SELECT id, topic, payload FROM queue_dead_letters"
                    " WHERE id = ANY(%s) AND resolution IS NULL ORDER BY id FOR UPDATE",
                    (row_ids(ids),),
                )
            ).fetchall()
            sent: list[int] = []
            for row in rows:
                entry_id = str(row["id"])
                if not isinstance(row["payload"], dict):
                    acted[entry_id] = EntryOutcome(entry_id, "not_redrivable", "the original message is not an object")
                    continue
                try:
                    await publish_message(row["topic"], row["payload"], key=f"{row['topic']}:redrive:{entry_id}")
                except Exception as error:  # noqa: BLE001 - reported per id; the entry stays listed
                    acted[entry_id] = EntryOutcome(entry_id, "failed", describe_error(error))
                    continue
                sent.append(row["id"])
                acted[entry_id] = EntryOutcome(entry_id, "redriven")
            await _resolve(conn, sent, "redriven", actor)
            resolutions = await _resolutions(conn, ids)
        return outcomes_in_order(ids, acted, resolutions)

    async def delete(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        async with connection() as conn, conn.transaction():
            deleted = await _resolve(conn, row_ids(ids), "deleted", actor)
            resolutions = await _resolutions(conn, ids)
        acted = {str(entry_id): EntryOutcome(str(entry_id), "deleted") for entry_id in deleted}
        return outcomes_in_order(ids, acted, resolutions)


async def _resolve(conn: Any, ids: list[int], resolution: str, actor: str) -> list[int]:
    if not ids:
        return []
    rows = await (
        await conn.execute(
            "UPDATE queue_dead_letters SET resolution = %s, resolved_at = now(), resolved_by = %s"
            " WHERE id = ANY(%s) AND resolution IS NULL RETURNING id",
            (resolution, actor, ids),
        )
    ).fetchall()
    return [row["id"] for row in rows]


async def _resolutions(conn: Any, ids: list[str]) -> dict[str, str]:
    rows = await (
        await conn.execute(
            "SELECT id, resolution FROM queue_dead_letters WHERE id = ANY(%s) AND resolution IS NOT NULL",
            (row_ids(ids),),
        )
    ).fetchall()
    return {str(row["id"]): row["resolution"] for row in rows}
