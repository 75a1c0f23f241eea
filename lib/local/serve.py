"""``scripts/serve``: every ``api/`` function in one long-running process — the home of the SSE
streams where the platform cannot stream (AWS Lambda buffers a Python function's response).

It is the dev server's router (``server.VercelRouter``: Vercel's file routing, ``public/``
served) without the development extras: no embedded Postgres, Redis or queue, no cron
scheduler, no ``/__dev`` routes, no generated secrets. The environment must name the services
and secrets (CONTRACTS §3); a missing one ends with one line on stderr. The ``Dockerfile``
runs it, and the AWS template runs that image as an ECS service behind the load balancer that
CloudFront sends ``/api/**/events`` to (``lib.ops.aws_streams``); crons and queues stay on
Lambda, EventBridge Scheduler and SQS.

``--health-check`` is the container's own health check: it asks the server on ``PORT`` for
``/__health`` (``lib.local.server.HEALTH_PATH``, which touches no service) and exits 0 or 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request

from lib.bundle import PROJECT_ROOT
from lib.http.app import refuse_to_start_unready
from lib.local.connections import server_config
from lib.local.server import HEALTH_PATH, Server, VercelRouter
from lib.settings import SettingsError, get_settings

REQUIRED = ("DATABASE_URL", "CLERK_JWT_KEY")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/serve", description="Serve every api/ function, production mode.")
    parser.add_argument("--host", default=os.environ.get("HOST", "0.0.0.0"))  # noqa: S104 - a container's port
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    parser.add_argument("--health-check", action="store_true", help="ask the running server on --port, exit 0 or 1")
    args = parser.parse_args(argv)
    if args.health_check:
        return 0 if is_healthy(args.port) else 1
    missing = [name for name in REQUIRED if not os.environ.get(name)]
    if missing:
        print(f"error: {', '.join(missing)} must be set (scripts/serve starts no services of its own)", file=sys.stderr)
        return 1
    try:
        get_settings()  # a setting out of its bounds is refused now, not at the first request
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    refuse_to_start_unready()
    router = VercelRouter(PROJECT_ROOT)
    print(f"serving {len(router.routes)} functions on http://{args.host}:{args.port}", flush=True)
    Server(server_config(router, args.host, args.port, log_level="warning", timeout_graceful_shutdown=5)).run()
    return 0


def is_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
