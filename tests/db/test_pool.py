"""lib.db.pool: lazy, one per loop, small, and a clear error when unconfigured."""

from __future__ import annotations

import asyncio

import pytest

from lib.db import pool as pool_module
from lib.db.pool import DatabaseNotConfigured, close_pools, connection, get_pool


async def test_pool_is_created_on_first_use_and_reused(db) -> None:
    await close_pools()
    assert asyncio.get_running_loop() not in pool_module._pools
    first = await get_pool()
    assert await get_pool() is first
    assert pool_module._pools[asyncio.get_running_loop()][1] is first
    assert first.max_size == 4 and first.min_size == 0
    async with connection() as conn:
        assert (await (await conn.execute("SELECT 1 AS one")).fetchone()) == {"one": 1}


async def test_max_size_is_configurable(db, set_env) -> None:
    await close_pools()
    set_env(ERMIS_DB_POOL_MAX_SIZE="2")
    assert (await get_pool()).max_size == 2
    await close_pools()


async def test_unset_database_url_raises_a_named_error(set_env) -> None:
    await close_pools()
    set_env(DATABASE_URL=None)
    with pytest.raises(DatabaseNotConfigured):
        await get_pool()
