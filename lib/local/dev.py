"""``scripts/dev``: every function on http://127.0.0.1:3000, as Vercel would serve it.

Start-up, in order:

1. Secrets: ``CRON_SECRET``, ``ERMIS_QUEUE_SIGNING_SECRET`` and ``CLERK_JWT_KEY`` are taken
   from the environment when set, otherwise generated for this session (the Clerk key is the
   development key pair's public half, see ``dev_keys``) and printed.
2. Services: ``DATABASE_URL`` unset → embedded Postgres; no ``REDIS_URL`` and no Upstash
   variables → embedded Redis; ``--upstash`` puts the Upstash REST front (``upstash_rest``) in
   front of that Redis so the production client is the one in use. Migrations are applied.
   Unless a real queue is configured (``VERCEL_OIDC_TOKEN`` / ``VERCEL_QUEUE_API_TOKEN``), the
   SDK's embedded Vercel Queue service starts, and ``queue_bridge`` pushes its messages to the
   consumer routes over HTTP (queue depths at ``/__dev/queues``).
3. The router (``server.VercelRouter``) on ``PORT`` and the cron scheduler (``scheduler``),
   which fires ``vercel.json``'s crons on their schedules with the cron bearer. It prints the
   operations console's and the realtime demo's URLs, and a development sign-in URL
   (``dev_sign_in``) that sets the ``__session`` cookie for a chosen persona. The fixture feeds
   (``public/fixtures/feeds``) get a loopback server of their own, the one destination the dev
   server adds to ``ERMIS_EGRESS_ALLOW`` (``allow_fixture_feed_server``).

The session's URL and cron secret are written to ``dev-session.json`` in the data directory
(``lib.local.paths``) for
``scripts/cron``. A port in use or a service that cannot start ends with one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
from datetime import datetime

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from vercel.queue.devserver import EmbeddedQueueDevServer, embedded_queue_dev_server

from lib.auth.gates import require_session
from lib.clock import iso_timestamp
from lib.db.migrate import apply_migrations
from lib.db.pool import connection
from lib.http.errors import ApiError, error_response
from lib.http.same_origin import check_same_origin
from lib.jobs.schedule import CronEntry, load_crons
from lib.local.connections import server_config
from lib.local.dev_keys import ensure_dev_key_pair
from lib.local.dev_sign_in import PERSONAS, sign_in_endpoint, sign_in_url, sign_out
from lib.local.paths import PROJECT_ROOT, data_dir, dev_key_dir, session_file
from lib.local.queue_bridge import PushBridge, queue_triggers
from lib.local.scheduler import CronScheduler, SimulatedClock, invoke_cron, system_clock
from lib.local.server import Server, VercelRouter
from lib.local.services import (
    EmbeddedPostgres,
    EmbeddedRedis,
    ServiceStartError,
    ensure_port_free,
    free_port,
)
from lib.settings import Settings, SettingsError, get_settings
from lib.streams.sse import open_streams


def _say(line: str) -> None:
    print(line, flush=True)


def prepare_secrets() -> str | None:
    """Returns the development private key when sessions are verified with its pair (the
    dev sign-in mints with it), ``None`` when the environment gives its own ``CLERK_JWT_KEY``."""
    for name in ("CRON_SECRET", "ERMIS_QUEUE_SIGNING_SECRET", "ERMIS_PSEUDONYM_KEY"):
        if not os.environ.get(name):
            os.environ[name] = secrets.token_urlsafe(32)
            _say(f"  generated {name}={os.environ[name]}")
    if os.environ.get("CLERK_JWT_KEY"):
        return None
    private_pem, public_pem = ensure_dev_key_pair(dev_key_dir())
    os.environ["CLERK_JWT_KEY"] = public_pem
    _say(f"  CLERK_JWT_KEY = the development key pair in {dev_key_dir()} (mint: scripts/dev-token)")
    return private_pem


def prepare_services(use_upstash: bool, started: list[EmbeddedPostgres | EmbeddedRedis]) -> int | None:
    """Embedded services where no URL is set (appended to ``started`` so the caller stops
    them); returns the Upstash front's port when asked for one."""
    if not os.environ.get("DATABASE_URL"):
        postgres = EmbeddedPostgres(data_dir() / "postgres")
        started.append(postgres)
        os.environ["DATABASE_URL"] = postgres.start()
        _say(f"  embedded Postgres: {os.environ['DATABASE_URL']}")
    if not os.environ.get("REDIS_URL") and not os.environ.get("UPSTASH_REDIS_REST_URL"):
        redis = EmbeddedRedis(data_dir() / "redis")
        started.append(redis)
        os.environ["REDIS_URL"] = redis.start()
        _say(f"  embedded Redis: {os.environ['REDIS_URL']}")
    upstash_port = None
    if use_upstash and not os.environ.get("UPSTASH_REDIS_REST_URL"):
        upstash_port = free_port()
        os.environ["UPSTASH_REDIS_REST_URL"] = f"http://127.0.0.1:{upstash_port}"
        os.environ["UPSTASH_REDIS_REST_TOKEN"] = secrets.token_urlsafe(24)
        _say(f"  Upstash REST front: {os.environ['UPSTASH_REDIS_REST_URL']} -> {os.environ['REDIS_URL']}")
    get_settings.cache_clear()
    applied = apply_migrations(os.environ["DATABASE_URL"])
    _say(f"  migrations: {', '.join(applied) if applied else 'up to date'}")
    return upstash_port


async def serve(
    host: str,
    port: int,
    clock_start: datetime | None,
    upstash_port: int | None,
    queue: EmbeddedQueueDevServer | None,
    dev_private_key: str | None,
) -> None:
    base_url = f"http://{host}:{port}"
    bridge = PushBridge(queue, base_url, queue_triggers(PROJECT_ROOT), _say) if queue else None
    dev_routes = {
        "/__dev/sign-in": Route("/__dev/sign-in", sign_in_endpoint(dev_private_key)),
        "/__dev/sign-out": Route("/__dev/sign-out", sign_out),
        "/__dev/streams": Route("/__dev/streams", open_streams_endpoint),
        "/__dev/test-alert": Route("/__dev/test-alert", test_alert_endpoint, methods=["GET", "POST"]),
    }
    if bridge:
        dev_routes["/__dev/queues"] = Route("/__dev/queues", bridge.depths_endpoint)
    router = VercelRouter(PROJECT_ROOT, dev_routes)
    servers = [Server(server_config(router, host, port, log_level="warning", timeout_graceful_shutdown=5))]
    fixture_feeds_url = allow_fixture_feed_server(servers)
    if upstash_port is not None:
        from lib.local.upstash_rest import upstash_rest_app

        front = upstash_rest_app(os.environ["REDIS_URL"], os.environ["UPSTASH_REDIS_REST_TOKEN"])
        servers.append(uvicorn.Server(uvicorn.Config(front, host="127.0.0.1", port=upstash_port, log_level="warning")))

    cron_secret = os.environ["CRON_SECRET"]

    async def fire(entry: CronEntry, moment: datetime) -> None:
        label = f"[cron] {iso_timestamp(moment)} {entry.name} GET {entry.path}"
        try:
            response = await invoke_cron(base_url, entry, cron_secret)
            _say(f"{label} -> {response.status_code} {response.text}")
        except Exception as error:  # noqa: BLE001 - keep scheduling the others
            _say(f"{label} failed: {error}")

    crons = load_crons(PROJECT_ROOT)
    clock = SimulatedClock(clock_start) if clock_start else system_clock
    scheduler = CronScheduler(crons, fire, clock)

    session = {
        "pid": os.getpid(),
        "url": base_url,
        "cronSecret": cron_secret,
        "databaseUrl": os.environ["DATABASE_URL"],
        "fixtureFeedsUrl": fixture_feeds_url,
        "queueSigningSecretSet": bool(os.environ.get("ERMIS_QUEUE_SIGNING_SECRET")),
    }
    session_file().write_text(json.dumps(session))
    session_file().chmod(0o600)

    # Announce only once the sockets accept connections: a script (or a test) that waits for
    # "serving" can connect straight away.
    serving = asyncio.gather(*(server.serve() for server in servers))
    while not all(server.started for server in servers) and not serving.done():  # noqa: ASYNC110 - uvicorn has no start event
        await asyncio.sleep(0.02)
    _say(f"serving {base_url}")
    for route in sorted(router.routes, key=lambda r: r.pattern):
        _say(f"  {base_url}{route.pattern}  <- {route.file}")
    _say(f"  fixture feeds: {fixture_feeds_url}/fixtures/feeds/ (the one private destination ERMIS_EGRESS_ALLOW adds)")
    for entry in crons:
        _say(f"  cron {entry.name:<24} {entry.schedule:<14} GET {entry.path}")
    if clock_start:
        _say(f"  cron clock starts at {iso_timestamp(clock_start)}")

    stop = asyncio.Event()
    background = [asyncio.create_task(scheduler.run(stop))]
    if bridge:
        routes = ", ".join(trigger.path for trigger in bridge.triggers)
        _say(f"  queue: embedded Vercel Queue service at {queue.base_url}, pushing to {routes}")
        background.append(asyncio.create_task(bridge.run(stop)))
    _say(f"operations console: {base_url}/admin/")
    _say(f"realtime demo:      {base_url}/realtime-demo.html")
    if dev_private_key:
        _say(f"sign in:            {sign_in_url(base_url, 'super_admin', '/admin/')}")
        _say(f"                    (as={'|'.join(PERSONAS)}; next=/realtime-demo.html for the demo)")
    else:
        _say("sign in:            through your Clerk instance (CLERK_JWT_KEY is set)")
    try:
        await serving
    finally:
        stop.set()
        await asyncio.gather(*background)


def allow_fixture_feed_server(servers: list[uvicorn.Server]) -> str:
    """Serve ``public/fixtures/feeds`` on a loopback port of its own (appended to ``servers``)
    and add that one ``host:port`` to ``ERMIS_EGRESS_ALLOW``: feeds are fetched through the
    egress guard, which refuses loopback like any private destination, and the fixture feeds
    are the only private destination the dev server needs — its own routes stay refused."""
    port = free_port()
    feeds = Starlette(routes=[Mount("/fixtures/feeds", StaticFiles(directory=PROJECT_ROOT / "public/fixtures/feeds"))])
    servers.append(Server(server_config(feeds, "127.0.0.1", port, log_level="warning", lifespan="off")))
    allowed = [entry for entry in (os.environ.get("ERMIS_EGRESS_ALLOW") or "").split(",") if entry.strip()]
    os.environ["ERMIS_EGRESS_ALLOW"] = ",".join([*allowed, f"127.0.0.1:{port}"])
    get_settings.cache_clear()
    return f"http://127.0.0.1:{port}"


async def test_alert_endpoint(request: Request) -> Response:
    """``POST /__dev/test-alert``: one alert for the signed-in session's tenant, written as the
    alert sweep writes them — the realtime demo's button, to watch a change travel from the
    insert to the frame. Development only (``lib/local`` is not deployed)."""
    if request.method != "POST":
        return error_response(405, "method_not_allowed", "POST to write a test alert.", allow="POST")
    try:
        check_same_origin(request)  # a page elsewhere cannot write with the developer's cookie
        session = require_session(request)
    except ApiError as error:
        return error.to_response()
    if session.tenant_scope_id is None:
        return error_response(409, "no_tenant", "The session has no tenant to write an alert for.")
    alert_id = f"test-alert-{secrets.token_hex(6)}"
    async with connection() as conn:
        cursor = await conn.execute(
            "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
            " VALUES (%s, %s, 'dev-test', %s, 'Test alert from the realtime demo', 'info', 'in-app')"
            " RETURNING delivered_at",
            (alert_id, session.tenant_scope_id, alert_id),
        )
        row = await cursor.fetchone()
    assert row is not None
    return JSONResponse({"id": alert_id, "deliveredAt": iso_timestamp(row["delivered_at"])}, status_code=201)


async def open_streams_endpoint(_request: Request) -> Response:
    """How many SSE streams this server holds open, by stream — how the browser tests see that
    three tabs share one connection."""
    return JSONResponse(dict(open_streams))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/dev", description="Serve every api/ function locally.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "3000")))
    parser.add_argument(
        "--cron-clock-start",
        type=datetime.fromisoformat,
        help="run the cron clock from this ISO instant (e.g. 2026-01-01T02:59:58+00:00)",
    )
    parser.add_argument("--upstash", action="store_true", help="use the Upstash REST client via upstash-local")
    args = parser.parse_args(argv)

    # SIGTERM (a supervisor, a test) shuts down like Ctrl-C, so the embedded services stop too.
    signal.signal(signal.SIGTERM, _interrupt)
    started: list[EmbeddedPostgres | EmbeddedRedis] = []
    try:
        ensure_port_free(args.host, args.port)
        Settings()  # a setting out of its bounds is refused now, not at the first request
        data_dir().mkdir(parents=True, exist_ok=True)
        _say("ErmisAI functions, local runtime")
        dev_private_key = prepare_secrets()
        upstash_port = prepare_services(args.upstash, started)
        with contextlib.ExitStack() as stack:
            queue = (
                stack.enter_context(embedded_queue_dev_server(manual_clock=False)) if _use_embedded_queue() else None
            )
            if queue is not None:
                os.environ.update(
                    VERCEL_QUEUE_BASE_URL=queue.base_url,
                    VERCEL_QUEUE_API_TOKEN=EMBEDDED_QUEUE_TOKEN,
                    VERCEL_REGION=os.environ.get("VERCEL_REGION") or "iad1",
                )
                get_settings.cache_clear()
            asyncio.run(serve(args.host, args.port, args.cron_clock_start, upstash_port, queue, dev_private_key))
    except (ServiceStartError, SettingsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        for service in reversed(started):
            service.stop()
    return 0


EMBEDDED_QUEUE_TOKEN = "local-token"  # noqa: S105 - what the SDK's embedded service accepts


def _use_embedded_queue() -> bool:
    return not (os.environ.get("VERCEL_OIDC_TOKEN") or os.environ.get("VERCEL_QUEUE_API_TOKEN"))


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
