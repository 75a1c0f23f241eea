"""Real-database fault injection for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg


@asynccontextmanager
async def table_refusing(db: psycopg.AsyncConnection, table: str, operation: str = "UPDATE") -> AsyncIterator[None]:
    """A trigger makes every ``operation`` (UPDATE, INSERT) on ``table`` fail with 'read-only
    today' inside the block."""
    await db.execute(
        "CREATE FUNCTION refuse_write() RETURNS trigger AS $$"
        " BEGIN RAISE EXCEPTION '% is read-only today', TG_TABLE_NAME; END $$ LANGUAGE plpgsql"
    )
    await db.execute(
        f"CREATE TRIGGER refuse_write BEFORE {operation} ON {table} FOR EACH ROW EXECUTE FUNCTION refuse_write()"
    )
    try:
        yield
    finally:
        await db.execute(f"DROP TRIGGER refuse_write ON {table}")
        await db.execute("DROP FUNCTION refuse_write()")


@asynccontextmanager
async def notification_written_back(db: psycopg.AsyncConnection, user_id: str) -> AsyncIterator[None]:
    """A writer racing an erasure, at the worst moment: inside the block, a delete from
    ``notifications`` writes a new notification of ``user_id`` (id ``late``) right after it,
    in the deleting transaction."""
    await db.execute(
        "CREATE FUNCTION write_back() RETURNS trigger AS $$ BEGIN"
        f" INSERT INTO notifications (id, user_id, type) VALUES ('late', {psycopg.sql.quote(user_id)}, 'system')"
        " ON CONFLICT DO NOTHING; RETURN NULL; END $$ LANGUAGE plpgsql"
    )
    await db.execute(
        "CREATE TRIGGER write_back AFTER DELETE ON notifications FOR EACH STATEMENT EXECUTE FUNCTION write_back()"
    )
    try:
        yield
    finally:
        await db.execute("DROP TRIGGER write_back ON notifications")
        await db.execute("DROP FUNCTION write_back()")
