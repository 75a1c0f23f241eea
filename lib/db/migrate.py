"""Schema migrations: plain SQL files in ``lib/db/migrations``, applied in name order.

Each file runs in its own transaction and is recorded in ``schema_migrations`` with its
checksum; a file already recorded is skipped, so ``apply_migrations`` is idempotent. A
transaction-scoped advisory lock serialises concurrent runners (two dev servers, parallel test
workers). A recorded file whose content changed is an error: ship a new file instead.

Run it with ``scripts/migrate`` (uses ``DATABASE_URL``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_LOCK_ID = 0x45524D4953  # "ERMIS"


def migration_files() -> list[Path]:
    return sorted(MIGRATIONS_DIR.glob("*.sql"))


def apply_migrations(conninfo: str) -> list[str]:
    """Apply every pending migration; returns the names applied now."""
    applied_now: list[str] = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for path in migration_files():
            sql = path.read_text()
            checksum = hashlib.sha256(sql.encode()).hexdigest()
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
                row = conn.execute("SELECT checksum FROM schema_migrations WHERE version = %s", (path.name,)).fetchone()
                if row is not None:
                    if row[0] != checksum:
                        raise RuntimeError(f"migration {path.name} changed after it was applied; add a new file")
                    continue
                conn.execute(sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, checksum) VALUES (%s, %s)",
                    (path.name, checksum),
                )
                applied_now.append(path.name)
    return applied_now
