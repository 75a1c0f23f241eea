"""GDPR erasure: requests with a grace window, and the purge that executes them (spec: the
erasure purge and the GDPR erasure runbook).

Lifecycle of a request (``data_erasure_requests``)::

    create (pending, grace_ends_at = now + grace) ──► cancel ──► cancelled
                     │
                     └── grace elapsed (cron) or confirm now (operator) ──► purged

``ERASURE_REGISTRY`` is the one list of where a person's data lives in Postgres: per table, the
column that names the subject (and the value it holds for them) and whether matching rows are
deleted or anonymised (the column set to NULL, keeping the row: billing totals stay, the link to
the person goes). A table that gains personal data gets an entry here, and the purge covers it.
Outside Postgres, the person is in Redis: in the AI ledger's retry lists (their usage waiting to
land: taken out of each entry, the usage kept — ``ai_ledger_retry.erase_person``) and in the
keys named after them (``REDIS_KEYS_OF_PERSON``: their stream slots). Log lines and error reports
never carry the id at all (``lib.observability.pseudonym``).

``confirm_data_erasure_request`` takes the person out of Redis first — Redis configured but
unreachable fails the purge, which stays pending and is retried — then runs one transaction:
lock the request, re-check it is still pending (if not — confirmed or cancelled concurrently —
return ``None``), take the person's erasure lock, apply every registry entry, mark it ``purged``
with ``purged_at`` and the counts. Any error rolls all of it back: the request stays pending and
no table is touched. The lock is what the ledger's writers take shared (``ai_usage``): a usage of
the person landing meanwhile either commits before the purge reads (and is anonymised by it) or
sees the request purged (and lands without the person); with the retry lists rewritten first, a
redrive in flight cannot bring the person back either (``ai_ledger_retry``).

Kept on purpose, listed in the runbook (README): the request's own record
(``data_erasure_requests.subject_user_id``), and the ids of operators in what they did
(``ops_audit_log.actor``, ``queue_dead_letters.resolved_by``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.platform import ai_ledger_retry
from lib.redis.client import get_redis
from lib.redis.commands import execute_command

if TYPE_CHECKING:
    from psycopg import AsyncConnection

psycopg_sql = lazy_import("psycopg.sql")
psycopg_json = lazy_import("psycopg.types.json")

DEFAULT_GRACE = timedelta(days=30)


@dataclass(frozen=True)
class ErasureTarget:
    table: str
    subject_column: str
    action: Literal["delete", "anonymise"]
    value: str = "{}"  # what the column holds for the person, ``{}`` standing for their id


ERASURE_REGISTRY: tuple[ErasureTarget, ...] = (
    ErasureTarget("notifications", "user_id", "delete"),
    ErasureTarget("stream_changes", "subject_user_id", "delete"),  # the positions of their notifications
    ErasureTarget("stream_channels", "channel", "delete", "user|{}"),  # their channel's horizon
    ErasureTarget("ai_usage_ledger", "user_id", "anonymise"),
)
REDIS_KEYS_OF_PERSON = ("stream-slots:user:{}",)  # lib.streams.limits: their open streams' slots
ERASURE_LOCK_CLASS = 1163018579  # 'ERAS': the advisory lock class of a person's erasure (with hashtext(id))


@dataclass(frozen=True)
class ErasureRequest:
    id: str
    subject_user_id: str
    status: str
    requested_at: datetime
    grace_ends_at: datetime
    purged_at: datetime | None = None
    purge_counts: dict[str, int] | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ErasureRequest:
        return cls(
            id=str(row["id"]),
            subject_user_id=row["subject_user_id"],
            status=row["status"],
            requested_at=row["requested_at"],
            grace_ends_at=row["grace_ends_at"],
            purged_at=row["purged_at"],
            purge_counts=row["purge_counts"],
        )


_COLUMNS = "id, subject_user_id, status, requested_at, grace_ends_at, purged_at, purge_counts"


async def create_data_erasure_request(subject_user_id: str, grace: timedelta = DEFAULT_GRACE) -> ErasureRequest:
    if not subject_user_id.strip():
        raise ValueError("subject_user_id is required")
    if grace < timedelta(0):
        raise ValueError("grace cannot be negative")
    async with connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO data_erasure_requests (id, subject_user_id, status, requested_at, grace_ends_at)"
            f" VALUES (%s, %s, 'pending', now(), now() + %s::interval) RETURNING {_COLUMNS}",
            (uuid.uuid4(), subject_user_id.strip(), grace),
        )
        return ErasureRequest.from_row(await cursor.fetchone())


async def cancel_data_erasure_request(request_id: str) -> bool:
    """Cancel a pending request; False when it is not pending (already purged or cancelled)."""
    async with connection() as conn:
        cursor = await conn.execute(
            "UPDATE data_erasure_requests SET status = 'cancelled', cancelled_at = now()"
            " WHERE id = %s AND status = 'pending'",
            (uuid.UUID(request_id),),
        )
        return cursor.rowcount == 1


async def get_data_erasure_request(request_id: str) -> ErasureRequest | None:
    async with connection() as conn:
        cursor = await conn.execute(
            f"SELECT {_COLUMNS} FROM data_erasure_requests WHERE id = %s",
            (uuid.UUID(request_id),),
        )
        row = await cursor.fetchone()
    return None if row is None else ErasureRequest.from_row(row)


async def list_due_data_erasure_requests() -> list[ErasureRequest]:
    async with connection() as conn:
        cursor = await conn.execute(
            f"SELECT {_COLUMNS} FROM data_erasure_requests"
            " WHERE status = 'pending' AND grace_ends_at <= now() ORDER BY grace_ends_at, id"
        )
        return [ErasureRequest.from_row(row) for row in await cursor.fetchall()]


async def _apply(conn: AsyncConnection, target: ErasureTarget, subject_user_id: str) -> int:
    table, column = psycopg_sql.Identifier(target.table), psycopg_sql.Identifier(target.subject_column)
    if target.action == "delete":
        statement = psycopg_sql.SQL("DELETE FROM {} WHERE {} = %s").format(table, column)
    else:
        statement = psycopg_sql.SQL("UPDATE {} SET {} = NULL WHERE {} = %s").format(table, column, column)
    cursor = await conn.execute(statement, (target.value.format(subject_user_id),))
    return cursor.rowcount


async def erase_from_redis(subject_user_id: str) -> dict[str, int]:
    """The person out of the retry lists and their keys gone; raises when Redis is configured
    but cannot be reached."""
    rewritten = await ai_ledger_retry.erase_person(subject_user_id)
    client = get_redis()
    keys = [pattern.format(subject_user_id) for pattern in REDIS_KEYS_OF_PERSON]
    deleted = 0 if client is None else int(await execute_command(client, "DEL", *keys))
    return {"redis:ai-ledger-retry-entries": rewritten, "redis:keys": deleted}


async def confirm_data_erasure_request(request_id: str) -> ErasureRequest | None:
    """Purge now, whatever the grace window; ``None`` when the request is no longer pending."""
    pending = await get_data_erasure_request(request_id)
    if pending is None or pending.status != "pending":
        return None
    return await purge_postgres(request_id, await erase_from_redis(pending.subject_user_id))


async def purge_postgres(request_id: str, outside: dict[str, int]) -> ErasureRequest | None:
    """The transaction of the purge (the module's docstring), its counts joined to ``outside``'s."""
    async with connection() as conn, conn.transaction():
        cursor = await conn.execute(
            "SELECT subject_user_id FROM data_erasure_requests WHERE id = %s AND status = 'pending' FOR UPDATE",
            (uuid.UUID(request_id),),
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        subject = row["subject_user_id"]
        await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (ERASURE_LOCK_CLASS, subject))
        counts = {target.table: await _apply(conn, target, subject) for target in ERASURE_REGISTRY} | outside
        cursor = await conn.execute(
            "UPDATE data_erasure_requests SET status = 'purged', purged_at = now(), purge_counts = %s"
            f" WHERE id = %s RETURNING {_COLUMNS}",
            (psycopg_json.Jsonb(counts), uuid.UUID(request_id)),
        )
        return ErasureRequest.from_row(await cursor.fetchone())
