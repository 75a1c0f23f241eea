"""The Redis client factory.

``get_redis()`` returns one async client per process and event loop:

- ``UPSTASH_REDIS_REST_URL`` + ``UPSTASH_REDIS_REST_TOKEN`` → ``upstash_redis.asyncio.Redis``,
  production's client (HTTP per command, no connection to hold across invocations);
- otherwise ``REDIS_URL`` → ``redis.asyncio.Redis`` (self-hosting, tests), decoding to ``str``
  like the Upstash client does, over at most ``REDIS_CONNECTIONS`` connections (a command
  waits for one rather than failing);
- otherwise ``None``: callers answer ``redis_not_configured`` where the spec says so.

Domain code talks to either through ``lib.redis.commands`` (raw commands and one-round-trip
pipelines), so it is written once. ``scripts/upstash-local`` lets the Upstash client run
against a local Redis, in development and in the tests.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from lib.lazy_imports import lazy_import
from lib.settings import Settings, get_settings, secret_or_none

redis_asyncio = lazy_import("redis.asyncio")
upstash_redis_asyncio = lazy_import("upstash_redis.asyncio")

# loop → (the settings it was built from, client): a settings reload (tests) rebuilds it.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Settings, Any]] = weakref.WeakKeyDictionary()

REDIS_NOT_CONFIGURED = "redis_not_configured"
REDIS_CONNECTIONS = 50  # per process and event loop; more concurrent commands wait their turn


def redis_kind() -> str | None:
    """Which client ``get_redis`` builds: ``"upstash"``, ``"redis"`` or ``None``."""
    settings = get_settings()
    if settings.upstash_redis_rest_url and secret_or_none(settings.upstash_redis_rest_token):
        return "upstash"
    if secret_or_none(settings.redis_url):
        return "redis"
    return None


def get_redis() -> Any | None:
    loop = asyncio.get_running_loop()
    settings = get_settings()
    cached = _clients.get(loop)
    if cached is not None and cached[0] is settings:
        return cached[1]
    kind = redis_kind()
    if kind is None:
        return None
    if kind == "upstash":
        client = upstash_redis_asyncio.Redis(
            url=settings.upstash_redis_rest_url,
            token=secret_or_none(settings.upstash_redis_rest_token),
            allow_telemetry=False,
        )
    else:
        # A bounded pool that waits for a free connection: redis-py's default pool refuses the
        # 101st concurrent command (MaxConnectionsError), and a reconnect storm (250 streams
        # claiming their slots at once) is exactly that many.
        pool = redis_asyncio.BlockingConnectionPool.from_url(
            secret_or_none(settings.redis_url), decode_responses=True, max_connections=REDIS_CONNECTIONS, timeout=5
        )
        client = redis_asyncio.Redis.from_pool(pool)  # closing the client closes its pool
    _clients[loop] = (settings, client)
    return client


async def close_redis() -> None:
    cached = _clients.pop(asyncio.get_running_loop(), None)
    if cached is not None:
        client = cached[1]
        # redis-py names it aclose(); the Upstash client, close().
        closer = getattr(client, "aclose", None) or client.close
        await closer()
