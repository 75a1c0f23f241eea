"""Real servers on loopback for tests: any ASGI app under uvicorn in a background thread
(stand-ins for third parties such as Sentry's ingest, and real-network checks of our own apps)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.types import ASGIApp

from lib.db.pool import close_pools
from lib.local.connections import server_config
from lib.local.server import Server
from lib.local.services import free_port
from lib.redis.client import close_redis
from lib.streams.listener import stop_change_listener


@contextmanager
def serve_in_thread(
    app: ASGIApp, tune_collector: bool = False, host: str = "127.0.0.1", port: int | None = None, **tls: str
) -> Iterator[str]:
    """Serve ``app`` on ``host`` (loopback) at ``port`` or a free one; yields its base URL, stops
    on exit. ``tls``: uvicorn's ``ssl_certfile`` and ``ssl_keyfile`` (then the URL is https). The
    collector tuning of ``Server`` is off unless asked: a test process starts hundreds of servers."""
    port = port or free_port(host)
    config = server_config(app, host, port, log_level="error", lifespan="off", timeout_graceful_shutdown=1, **tls)
    server = Server(config, tune_collector=tune_collector)

    async def serve_then_release() -> None:
        try:
            await server.serve()
        finally:
            # The app's pool, Redis client and change listener belong to this thread's loop: close
            # them with it, or every test server would leave its database connections open.
            await stop_change_listener()
            await close_pools()
            await close_redis()

    thread = threading.Thread(target=lambda: asyncio.run(serve_then_release()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
