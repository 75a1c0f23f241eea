"""The operators' audit log (``ops_audit_log``, issue 11): every action an operator takes on
stuck work (redrive, delete) and every flag change, with who (the session's ``sub``), what,
which entries, the reason given, when, and the per-entry outcome. Written after the action, in
one statement; if that write fails the action is reported through ``log_server_error`` with the
same fields, so no action goes unrecorded.
"""

from __future__ import annotations

from typing import Any

from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error

psycopg_json = lazy_import("psycopg.types.json")

MAX_AUDIT_LIMIT = 200


async def record_operator_action(
    actor: str, action: str, source: str, target_ids: list[str], reason: str | None, outcome: Any
) -> int | None:
    """The audit row's id, or ``None`` when it could not be written (then logged instead)."""
    try:
        async with connection() as conn:
            row = await (
                await conn.execute(
                    "INSERT INTO ops_audit_log (actor, action, source, target_ids, reason, outcome)"
                    " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                    (actor, action, source, psycopg_json.Jsonb(target_ids), reason, psycopg_json.Jsonb(outcome)),
                )
            ).fetchone()
            return int(row["id"])
    except Exception as error:  # noqa: BLE001 - the action happened; its record goes to the log
        log_server_error(
            "ops-audit", error, actor=actor, action=action, source=source, targetIds=target_ids, outcome=outcome
        )
        return None


async def read_audit_log(limit: int) -> list[dict[str, Any]]:
    async with connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT id, actor, action, source, target_ids, reason, outcome, at FROM ops_audit_log"
                " ORDER BY at DESC, id DESC LIMIT %s",
                (limit,),
            )
        ).fetchall()
    return [
        {
            "id": row["id"],
            "actor": row["actor"],
            "action": row["action"],
            "source": row["source"],
            "targetIds": row["target_ids"],
            "reason": row["reason"],
            "outcome": row["outcome"],
            "at": iso_timestamp(row["at"]),
        }
        for row in rows
    ]
