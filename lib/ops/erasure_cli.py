"""``scripts/erasure``: the GDPR erasure lifecycle from a terminal, against ``DATABASE_URL`` (or
the running dev server's database).

    scripts/erasure create USER_ID [--grace-days 30]   request erasure after a grace window
    scripts/erasure list                                 due requests (grace elapsed, pending)
    scripts/erasure show REQUEST_ID                      one request, with its purge counts
    scripts/erasure cancel REQUEST_ID                    withdraw a pending request
    scripts/erasure confirm REQUEST_ID                   purge now, ignoring the grace window

Output is JSON, one object per command.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from datetime import timedelta
from typing import Any

from lib.db.pool import close_pools
from lib.ops.cli import run_script, use_script_database
from lib.platform.erasure import (
    cancel_data_erasure_request,
    confirm_data_erasure_request,
    create_data_erasure_request,
    get_data_erasure_request,
    list_due_data_erasure_requests,
)


def _request_json(request: Any) -> Any:
    return None if request is None else dataclasses.asdict(request)


async def run(args: argparse.Namespace) -> tuple[int, Any]:
    try:
        if args.command == "create":
            created = await create_data_erasure_request(args.user_id, timedelta(days=args.grace_days))
            return 0, _request_json(created)
        if args.command == "list":
            return 0, [_request_json(request) for request in await list_due_data_erasure_requests()]
        if args.command == "show":
            found = await get_data_erasure_request(args.request_id)
            return (0 if found else 1), _request_json(found) or {"error": "no such request"}
        if args.command == "cancel":
            cancelled = await cancel_data_erasure_request(args.request_id)
            return (0 if cancelled else 1), {"cancelled": cancelled}
        confirmed = await confirm_data_erasure_request(args.request_id)
        if confirmed is None:
            return 1, {"error": "request is not pending (already purged, cancelled, or unknown)"}
        return 0, _request_json(confirmed)
    finally:
        await close_pools()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/erasure", description="GDPR erasure requests")
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="request erasure of a user's data")
    create.add_argument("user_id")
    create.add_argument("--grace-days", type=float, default=30.0)
    commands.add_parser("list", help="due requests")
    for name in ("show", "cancel", "confirm"):
        commands.add_parser(name).add_argument("request_id")
    args = parser.parse_args(argv)

    def run_command() -> int:
        use_script_database()
        try:
            code, output = asyncio.run(run(args))
        except ValueError as error:
            code, output = 2, {"error": str(error)}
        print(json.dumps(output, default=str, indent=2))
        return code

    return run_script(run_command)


if __name__ == "__main__":
    sys.exit(main())
