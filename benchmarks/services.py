"""Real Postgres and Redis for a benchmark run: the ones ``DATABASE_URL`` / ``REDIS_URL`` name
(in a scratch database of its own), or embedded ones in a temp dir — the same rule as the tests."""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from lib.db.migrate import apply_migrations
from lib.local.services import EmbeddedPostgres, EmbeddedRedis
from lib.settings import get_settings
from tests.support.env import env_setter

SCRATCH_DATABASE = "ermis_benchmark"


@contextmanager
def benchmark_services() -> Iterator[tuple[str, str]]:
    """Sets ``DATABASE_URL`` and ``REDIS_URL`` for the bundle; yields them."""
    given_database, given_redis = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    stops = []
    with tempfile.TemporaryDirectory(prefix="ermis-bench-") as scratch:
        if given_database:
            with psycopg.connect(given_database, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(SCRATCH_DATABASE))
                )
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(SCRATCH_DATABASE)))
            database_url = psycopg.conninfo.make_conninfo(given_database, dbname=SCRATCH_DATABASE)
        else:
            postgres = EmbeddedPostgres(Path(scratch) / "postgres", SCRATCH_DATABASE)
            database_url = postgres.start()
            stops.append(postgres.stop)
        if given_redis:
            redis_url = given_redis
        else:
            redis = EmbeddedRedis(Path(scratch) / "redis")
            redis_url = redis.start()
            stops.append(redis.stop)
        apply_migrations(database_url)
        os.environ.update(DATABASE_URL=database_url, REDIS_URL=redis_url)
        get_settings.cache_clear()
        try:
            yield database_url, redis_url
        finally:
            for stop in reversed(stops):
                stop()


UNREACHABLE_REDIS_URL = "redis://127.0.0.1:9/0"  # no change bus: the streams poll


def use_change_bus(reachable: bool) -> None:
    """Whether the bundle's streams reach the change bus from now on: the run's Redis (push),
    or an unreachable one (the polled design; stream slots then hold per process only)."""
    os.environ.setdefault("ERMIS_BENCH_REDIS_URL", os.environ["REDIS_URL"])
    os.environ["REDIS_URL"] = os.environ["ERMIS_BENCH_REDIS_URL"] if reachable else UNREACHABLE_REDIS_URL
    get_settings.cache_clear()


@contextmanager
def counting_statements() -> Iterator[Counter]:
    """Counts every query the bundle sends (psycopg's ``AsyncConnection.execute``) while open."""
    counter: Counter = Counter()
    original = psycopg.AsyncConnection.execute

    async def counting(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        counter["all"] += 1
        return await original(self, query, params, **kwargs)

    psycopg.AsyncConnection.execute = counting  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        psycopg.AsyncConnection.execute = original  # type: ignore[method-assign]


@contextmanager
def settings_env(values: dict[str, str]) -> Iterator[None]:
    """``values`` in the environment (read by the bundle's settings here and by the processes
    started meanwhile) until the block ends, set as the tests set theirs (``env_setter``)."""
    try:
        with pytest.MonkeyPatch.context() as patch:
            env_setter(patch)(**values)
            yield
    finally:
        get_settings.cache_clear()  # the environment is back as it was: so are the settings


def option_value(name: str) -> str | None:
    """The value after ``name`` on the command line, if it is there."""
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args[:-1] else None
