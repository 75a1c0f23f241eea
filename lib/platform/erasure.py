"""GDPR erasure: requests with a grace window, and the purge that executes them (spec: the
erasure purge and the GDPR erasure runbook).

Lifecycle of a request (``data_erasure_requests``)::

    create (pending, grace_ends_at = now + grace) ──► cancel ──► cancelled
                     │
                     └── grace elapsed (cron) or confirm now (operator) ──► purge ──► purged
                                                                              │  ▲
                                                    verification found leftovers ▼  │ tried again
                                                                              failed

``ERASURE_REGISTRY`` is the one list of where a person's data lives in Postgres: per table, the
column that names the subject (and the value it holds for them) and whether matching rows are
deleted or anonymised (the column set to NULL, keeping the row: billing totals stay, the link to
the person goes). A table that gains personal data gets an entry here, and the purge covers it.
Every match is by equality on the column's value, never a pattern. Outside Postgres, the person
is in Redis: in the AI ledger's retry lists (their usage waiting to land: taken out of each
entry by value, the usage kept — ``lib.platform.ai_ledger_erasure``) and in the keys named
after them (``REDIS_KEYS_OF_PERSON``: their stream slots). Log lines and error reports never
carry the id at all (``lib.observability.pseudonym``).

``confirm_data_erasure_request`` pauses the ledger redrive (so nothing moves in the lists it
walks), takes the person out of Redis — Redis configured but unreachable fails the purge, and
the request stays as it was — then runs one transaction: lock the request, re-check it is still
pending or failed (if not — confirmed or cancelled concurrently — return ``None``), take the
person's erasure lock, apply every registry entry, then **verify**: read every registry table
and the Redis lists and keys again, by value. Nothing left: ``purged`` with ``purged_at`` and
the counts. Something left (a writer racing the purge, a list entry pushed after the walk):
``failed``, with ``leftovers`` (place → count) beside the counts; the deletions stay (they
were right), and the purge cron tries the request again on its next run. Any error rolls the
transaction back: the request keeps its status and no table is touched. Lock waits are bounded
(``LOCK_TIMEOUT``). The lock is what the ledger's writers take shared (``ai_usage``): a usage of
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
from lib.platform import ai_ledger_erasure
from lib.redis.client import get_redis
from lib.redis.commands import execute_command

if TYPE_CHECKING:
    from psycopg import AsyncConnection

psycopg_sql = lazy_import("psycopg.sql")
psycopg_json = lazy_import("psycopg.types.json")

DEFAULT_GRACE = timedelta(days=30)
PURGEABLE = ("pending", "failed")  # a failed purge is tried again, by the cron or an operator
LOCK_TIMEOUT = "10s"  # the purge waits this long for a lock (a writer of the person's rows), then fails


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
    leftovers: dict[str, int] | None = None
    verified_at: datetime | None = None

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
            leftovers=row["leftovers"],
            verified_at=row["verified_at"],
        )


_COLUMNS = "id, subject_user_id, status, requested_at, grace_ends_at, purged_at, purge_counts, leftovers, verified_at"


async def create_data_erasure_request(subject_user_id: str, grace: timedelta = DEFAULT_GRACE) -> ErasureRequest:
    if not subject_user_id.strip():  # kept exactly as given: " u1" is not "u1"
        raise ValueError("subject_user_id is required")
    if grace < timedelta(0):
        raise ValueError("grace cannot be negative")
    async with connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO data_erasure_requests (id, subject_user_id, status, requested_at, grace_ends_at)"
            f" VALUES (%s, %s, 'pending', now(), now() + %s::interval) RETURNING {_COLUMNS}",
            (uuid.uuid4(), subject_user_id, grace),
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
            " WHERE status IN ('pending', 'failed') AND grace_ends_at <= now() ORDER BY grace_ends_at, id"
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


def _redis_keys_of(subject_user_id: str) -> list[str]:
    return [pattern.format(subject_user_id) for pattern in REDIS_KEYS_OF_PERSON]


async def erase_from_redis(subject_user_id: str, pause: ai_ledger_erasure.RedrivePause | None = None) -> dict[str, int]:
    """The person out of the retry lists and their keys gone; raises when Redis is configured
    but cannot be reached."""
    rewritten = await ai_ledger_erasure.erase_person(subject_user_id, pause)
    client = get_redis()
    deleted = 0 if client is None else int(await execute_command(client, "DEL", *_redis_keys_of(subject_user_id)))
    return {"redis:ai-ledger-retry-entries": rewritten, "redis:keys": deleted}


async def leftovers_of(conn: AsyncConnection, subject_user_id: str) -> dict[str, int]:
    """Every place the registry and Redis name the person, read again by value: place → how
    many (only the places where something is left)."""
    found = {}
    for target in ERASURE_REGISTRY:
        statement = psycopg_sql.SQL("SELECT count(*) AS n FROM {} WHERE {} = %s").format(
            psycopg_sql.Identifier(target.table), psycopg_sql.Identifier(target.subject_column)
        )
        row = await (await conn.execute(statement, (target.value.format(subject_user_id),))).fetchone()
        found[target.table] = row["n"]
    found["redis:ai-ledger-retry-entries"] = await ai_ledger_erasure.entries_naming(subject_user_id)
    client = get_redis()
    if client is not None:
        found["redis:keys"] = int(await execute_command(client, "EXISTS", *_redis_keys_of(subject_user_id)))
    return {place: count for place, count in found.items() if count}


async def confirm_data_erasure_request(request_id: str) -> ErasureRequest | None:
    """Purge now, whatever the grace window; ``None`` when the request is neither pending nor
    failed. The request ends ``purged``, or ``failed`` with its leftovers."""
    pending = await get_data_erasure_request(request_id)
    if pending is None or pending.status not in PURGEABLE:
        return None
    async with ai_ledger_erasure.redrive_paused() as pause:
        outside = await erase_from_redis(pending.subject_user_id, pause)
        if pause is not None:
            await pause.renew()  # the transaction below has its whole pause to verify in
        return await purge_postgres(request_id, outside)


async def purge_postgres(request_id: str, outside: dict[str, int]) -> ErasureRequest | None:
    """The transaction of the purge (the module's docstring), its counts joined to ``outside``'s."""
    async with connection() as conn, conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor = await conn.execute(
            "SELECT subject_user_id FROM data_erasure_requests"
            " WHERE id = %s AND status IN ('pending', 'failed') FOR UPDATE",
            (uuid.UUID(request_id),),
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        subject = row["subject_user_id"]
        await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (ERASURE_LOCK_CLASS, subject))
        counts = {target.table: await _apply(conn, target, subject) for target in ERASURE_REGISTRY} | outside
        leftovers = await leftovers_of(conn, subject)
        cursor = await conn.execute(
            "UPDATE data_erasure_requests SET status = %s, purge_counts = %s, leftovers = %s, verified_at = now(),"
            " purged_at = CASE WHEN %s THEN now() END"
            f" WHERE id = %s RETURNING {_COLUMNS}",
            (
                "failed" if leftovers else "purged",
                psycopg_json.Jsonb(counts),
                psycopg_json.Jsonb(leftovers) if leftovers else None,
                not leftovers,
                uuid.UUID(request_id),
            ),
        )
        return ErasureRequest.from_row(await cursor.fetchone())
