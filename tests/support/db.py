"""Real-database fault injection for tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg


@asynccontextmanager
async def table_refusing_updates(db: psycopg.AsyncConnection, table: str) -> AsyncIterator[None]:
    """A trigger makes every UPDATE of ``table`` fail with 'read-only today' inside the block."""
    await db.execute(
        "CREATE FUNCTION refuse_update() RETURNS trigger AS $$"
        " BEGIN RAISE EXCEPTION '% is read-only today', TG_TABLE_NAME; END $$ LANGUAGE plpgsql"
    )
    await db.execute(
        f"CREATE TRIGGER refuse_update BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION refuse_update()"
    )
    try:
        yield
    finally:
        await db.execute(f"DROP TRIGGER refuse_update ON {table}")
        await db.execute("DROP FUNCTION refuse_update()")
