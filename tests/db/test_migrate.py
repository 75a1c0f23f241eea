"""lib.db.migrate: every CONTRACTS §6 table, applied once, recorded, idempotent."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

from lib.db import migrate
from lib.db.migrate import apply_migrations, migration_files

CONTRACT_COLUMNS = {
    table: set(columns.split())
    for table, columns in {
        "platform_state": "key value expires_at updated_at",
        "platform_state_hash": "key field value updated_at",
        "ai_usage_metering_outbox": "id event status attempt_count last_error created_at processed_at",
        "ai_usage_ledger": "id tenant_scope_id user_id model input_tokens output_tokens created_at",
        "data_erasure_requests": "id subject_user_id status requested_at grace_ends_at purged_at",
        "editorial_story_drafts": "id tenant_scope_id story_id headline summary status phase created_at updated_at",
        "notifications": "id user_id tenant_scope_id title body type read created_at",
        "alert_history": "id tenant_scope_id rule_id story_id title severity channel delivered_at",
        "review_status_events": "id tenant_scope_id story_id headline action changed_at",
        "delivery_logs": "id delivery_id tenant_scope_id method response_code endpoint status created_at",
        "source_sets": "key feeds created_at",
        "newsroom_profiles": "tenant_scope_id status source_set_key content_locale updated_at",
    }.items()
}


@pytest.fixture
def fresh_database(database_url: str):
    # The process's own name: two suites on one server (a CI run beside a local one) must not
    # drop each other's database mid-test.
    name = f"ermis_migrate_check_{os.getpid()}"
    admin_url = psycopg.conninfo.make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(database_url, dbname=name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_first_run_applies_everything_then_nothing(fresh_database: str) -> None:
    names = [path.name for path in migration_files()]
    assert apply_migrations(fresh_database) == names
    assert apply_migrations(fresh_database) == []
    with psycopg.connect(fresh_database) as conn:
        recorded = [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert recorded == names


def test_every_contract_table_has_its_columns(fresh_database: str) -> None:
    apply_migrations(fresh_database)
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        ).fetchall()
    columns: dict[str, set[str]] = {}
    for table, column in rows:
        columns.setdefault(table, set()).add(column)
    for table, expected in CONTRACT_COLUMNS.items():
        assert expected <= columns.get(table, set()), table


def test_a_changed_migration_is_refused(fresh_database: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "0001_a.sql"
    first.write_text("CREATE TABLE t1 (id int);")
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", tmp_path)
    assert apply_migrations(fresh_database) == ["0001_a.sql"]
    first.write_text("CREATE TABLE t1 (id bigint);")
    with pytest.raises(RuntimeError, match="changed after it was applied"):
        apply_migrations(fresh_database)


def test_a_failing_migration_leaves_nothing_half_applied(
    fresh_database: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "0001_bad.sql").write_text("CREATE TABLE half (id int); SELECT * FROM no_such_table;")
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", tmp_path)
    with pytest.raises(psycopg.errors.UndefinedTable):
        apply_migrations(fresh_database)
    with psycopg.connect(fresh_database) as conn:
        assert conn.execute("SELECT to_regclass('half')").fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (0,)
