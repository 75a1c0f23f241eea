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
