"""The Postgres connection pool, sized for serverless.

One ``psycopg_pool.AsyncConnectionPool`` per process and event loop, opened lazily on first use
(no connection at import, so a cold start that never touches the database pays nothing).
``min_size`` is 0 so an idle instance holds no connections, and ``max_size`` is small
(``ERMIS_DB_POOL_MAX_SIZE``, default 4): many warm instances share one Postgres, so each keeps
only what one invocation can use. Pools are keyed by event loop because a pool's connections
belong to the loop that opened them (a test client or Mangum may run another loop).

Waiting for a connection is bounded by ``ERMIS_DB_CONNECT_TIMEOUT_S`` (default 5 s): a dead
database answers the typed 500 quickly instead of hanging the invocation.

``DATABASE_URL`` unset: ``DatabaseNotConfigured``, which routes turn into the typed 500.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from lib.lazy_imports import lazy_import
from lib.settings import Settings, get_settings, secret_or_none

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

psycopg_pool = lazy_import("psycopg_pool")
psycopg_rows = lazy_import("psycopg.rows")

# loop → (the settings it was built from, pool): a settings reload (tests) replaces the pool.
_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Settings, AsyncConnectionPool]] = (
    weakref.WeakKeyDictionary()
)


class DatabaseNotConfigured(RuntimeError):
    def __init__(self) -> None:
        super().__init__("DATABASE_URL is not set")


async def get_pool() -> AsyncConnectionPool:
    loop = asyncio.get_running_loop()
    settings = get_settings()
    cached = _pools.get(loop)
    if cached is not None:
        if cached[0] is settings:
            return cached[1]
        await close_pools()
    conninfo = secret_or_none(settings.database_url)
    if conninfo is None:
        raise DatabaseNotConfigured()
    pool = psycopg_pool.AsyncConnectionPool(
        conninfo,
        min_size=0,
        max_size=settings.db_pool_max_size,
        timeout=settings.db_connect_timeout_s,
        kwargs={"row_factory": psycopg_rows.dict_row, "connect_timeout": max(1, round(settings.db_connect_timeout_s))},
        open=False,
        name="ermis",
    )
    _pools[loop] = (settings, pool)
    await pool.open(wait=False)
    return pool


@asynccontextmanager
async def connection() -> AsyncIterator[AsyncConnection]:
    """A pooled connection; leaving the block commits, or rolls back on an exception."""
    pool = await get_pool()
    async with pool.connection() as conn:
        yield conn


async def close_pools() -> None:
    """Close this loop's pool (tests and the dev server on shutdown)."""
    cached = _pools.pop(asyncio.get_running_loop(), None)
    if cached is not None:
        await cached[1].close()
