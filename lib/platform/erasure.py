"""GDPR erasure: requests with a grace window, and the purge that executes them (spec: the
erasure purge and the GDPR erasure runbook).

Lifecycle of a request (``data_erasure_requests``)::

    create (pending, grace_ends_at = now + grace) ──► cancel ──► cancelled
                     │
                     └── grace elapsed (cron) or confirm now (operator) ──► purged

``ERASURE_REGISTRY`` is the one list of where a person's data lives: per table, the column
that names the subject and whether matching rows are deleted or anonymised (the column set
to NULL, keeping the row: billing totals stay, the link to the person goes). A table that
gains personal data gets an entry here, and the purge covers it.

``confirm_data_erasure_request`` runs one transaction: lock the request, re-check it is still
pending (if not — confirmed or cancelled concurrently — return ``None``), apply every registry
entry, mark it ``purged`` with ``purged_at`` and the per-table counts. Any error rolls all of
it back: the request stays pending and no table is touched.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from lib.db.pool import connection
from lib.lazy_imports import lazy_import

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


ERASURE_REGISTRY: tuple[ErasureTarget, ...] = (
    ErasureTarget("notifications", "user_id", "delete"),
    ErasureTarget("stream_changes", "subject_user_id", "delete"),  # the positions of their notifications
    ErasureTarget("ai_usage_ledger", "user_id", "anonymise"),
)


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
    cursor = await conn.execute(statement, (subject_user_id,))
    return cursor.rowcount


async def confirm_data_erasure_request(request_id: str) -> ErasureRequest | None:
    """Purge now, whatever the grace window; ``None`` when the request is no longer pending."""
    async with connection() as conn, conn.transaction():
        cursor = await conn.execute(
            "SELECT subject_user_id FROM data_erasure_requests WHERE id = %s AND status = 'pending' FOR UPDATE",
            (uuid.UUID(request_id),),
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        counts = {target.table: await _apply(conn, target, row["subject_user_id"]) for target in ERASURE_REGISTRY}
        cursor = await conn.execute(
            "UPDATE data_erasure_requests SET status = 'purged', purged_at = now(), purge_counts = %s"
            f" WHERE id = %s RETURNING {_COLUMNS}",
            (psycopg_json.Jsonb(counts), uuid.UUID(request_id)),
        )
        return ErasureRequest.from_row(await cursor.fetchone())
