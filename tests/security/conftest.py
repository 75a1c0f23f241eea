"""What the adversarial tests share: every function behind the dev router (as ``scripts/serve``
serves them), and a snapshot of everything a request could have changed."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from redis import Redis

from lib.local.paths import PROJECT_ROOT
from lib.local.server import VercelRouter
from tests.conftest import TABLES
from tests.support.servers import serve_in_thread

ROUTER = VercelRouter(PROJECT_ROOT)
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def served_methods() -> list[tuple[str, str]]:
    """``(path, method)`` for every method every function serves."""
    return [
        (route.path.replace("{storyId}", "story-1"), method)
        for app in ROUTER.apps.values()
        for route in app.routes
        for method in sorted(route.methods)
    ]


async def everything_stored(db: psycopg.AsyncConnection, redis_url: str) -> dict[str, int]:
    """The row count of every table and the number of Redis keys: what running any job changes."""
    counts = ", ".join(f"(SELECT count(*) FROM {table}) AS {table}" for table in TABLES)
    row = await (await db.execute(f"SELECT {counts}")).fetchone()
    with Redis.from_url(redis_url) as direct:
        return {**dict(zip(TABLES, row, strict=True)), "redis keys": direct.dbsize()}


@pytest.fixture
def operator_cookie(mint_token) -> Iterator[dict[str, str]]:
    """A signed-in super admin's browser: the session in the ``__session`` cookie only."""
    yield {"cookie": f"__session={mint_token(platform_role='super_admin', sub='user_admin')}"}


@pytest.fixture(scope="module")
def served_url(bundle_environment) -> Iterator[str]:
    """Every function on a loopback socket, as ``scripts/serve`` serves them."""
    with serve_in_thread(ROUTER) as url:
        yield url
