"""The Postgres KV store: ``platform_state`` (key → JSON with optional expiry) and
``platform_state_hash`` (key → field → JSON), the spec's platform state helpers.

Reads ignore rows whose ``expires_at`` has passed, so expiry is exact even before the state
cleanup cron physically deletes them. Prefix listings escape ``LIKE`` wildcards, so a prefix is
matched literally, and use the ``text_pattern_ops`` index.

The two ``delete_*_batch`` functions serve that cleanup cron: each removes at most
``batch_size`` rows in its own short transaction, picking rows with ``SKIP LOCKED`` so a
concurrent writer or a second cleanup is never blocked on a long lock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from lib.db.pool import connection
from lib.lazy_imports import lazy_import

psycopg_json = lazy_import("psycopg.types.json")


def like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


async def get_state(key: str) -> Any | None:
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT value FROM platform_state WHERE key = %s AND (expires_at IS NULL OR expires_at > now())",
            (key,),
        )
        row = await cursor.fetchone()
    return None if row is None else row["value"]


async def set_state(key: str, value: Any, ttl: timedelta | None = None) -> None:
    async with connection() as conn:
        await conn.execute(
            "INSERT INTO platform_state (key, value, expires_at, updated_at)"
            " VALUES (%s, %s, now() + %s::interval, now())"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value,"
            " expires_at = EXCLUDED.expires_at, updated_at = now()",
            (key, psycopg_json.Jsonb(value), ttl),
        )


async def delete_state(key: str) -> bool:
    async with connection() as conn:
        cursor = await conn.execute("DELETE FROM platform_state WHERE key = %s", (key,))
    return cursor.rowcount > 0


async def list_state_keys_by_prefix(prefix: str) -> list[str]:
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT key FROM platform_state WHERE key LIKE %s"
            " AND (expires_at IS NULL OR expires_at > now()) ORDER BY key",
            (like_prefix(prefix),),
        )
        return [row["key"] for row in await cursor.fetchall()]


async def get_state_hash(key: str) -> dict[str, Any]:
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT field, value FROM platform_state_hash WHERE key = %s ORDER BY field", (key,)
        )
        return {row["field"]: row["value"] for row in await cursor.fetchall()}


async def get_state_hash_field(key: str, field: str) -> Any | None:
    async with connection() as conn:
        cursor = await conn.execute("SELECT value FROM platform_state_hash WHERE key = %s AND field = %s", (key, field))
        row = await cursor.fetchone()
    return None if row is None else row["value"]


async def set_state_hash_field(key: str, field: str, value: Any) -> None:
    async with connection() as conn:
        await conn.execute(
            "INSERT INTO platform_state_hash (key, field, value, updated_at)"
            " VALUES (%s, %s, %s, now())"
            " ON CONFLICT (key, field) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
            (key, field, psycopg_json.Jsonb(value)),
        )


async def delete_state_hash_field(key: str, field: str) -> bool:
    async with connection() as conn:
        cursor = await conn.execute("DELETE FROM platform_state_hash WHERE key = %s AND field = %s", (key, field))
    return cursor.rowcount > 0


async def list_state_hash_keys_by_prefix(prefix: str) -> list[str]:
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT DISTINCT key FROM platform_state_hash WHERE key LIKE %s ORDER BY key",
            (like_prefix(prefix),),
        )
        return [row["key"] for row in await cursor.fetchall()]


async def delete_expired_state_batch(batch_size: int) -> int:
    async with connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM platform_state WHERE key IN ("
            " SELECT key FROM platform_state"
            " WHERE expires_at IS NOT NULL AND expires_at < now()"
            " LIMIT %s FOR UPDATE SKIP LOCKED)",
            (batch_size,),
        )
    return cursor.rowcount


async def delete_stale_hash_records_batch(prefix: str, older_than: timedelta, batch_size: int) -> int:
    async with connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM platform_state_hash WHERE (key, field) IN ("
            " SELECT key, field FROM platform_state_hash"
            " WHERE key LIKE %s AND updated_at < now() - %s::interval"
            " LIMIT %s FOR UPDATE SKIP LOCKED)",
            (like_prefix(prefix), older_than, batch_size),
        )
    return cursor.rowcount
