"""``scripts/migrate``: apply the pending SQL migrations (``lib.db.migrate``) to
``DATABASE_URL``, or to the running dev server's database."""

from __future__ import annotations

from lib.db.migrate import apply_migrations
from lib.ops.cli import run_script, use_script_database


def migrate() -> int:
    applied = apply_migrations(use_script_database())
    print(f"migrations applied: {', '.join(applied) if applied else 'none pending'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(migrate))
