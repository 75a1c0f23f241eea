"""``scripts/cron NAME|PATH``: fire one ``vercel.json`` cron now against the dev server.

NAME is the path after ``/api/admin/`` with ``/`` as ``-`` (``state-cleanup``); PATH is the
cron's path. The dev server's URL and cron secret come from the dev session file (``lib.local.paths``)
(``CRON_SECRET`` and ``ERMIS_DEV_URL`` in the environment win). Exit 0 on a 2xx.
"""

from __future__ import annotations

import asyncio
import os
import sys

import httpx

from lib.jobs.schedule import find_cron, load_crons
from lib.local.paths import PROJECT_ROOT, dev_session
from lib.local.scheduler import invoke_cron


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    crons = load_crons(PROJECT_ROOT)
    if len(argv) != 1:
        names = ", ".join(entry.name for entry in crons)
        print(f"usage: scripts/cron NAME|PATH   (names: {names})", file=sys.stderr)
        return 2
    entry = find_cron(crons, argv[0])
    if entry is None:
        print(f"error: no cron named {argv[0]!r} in vercel.json", file=sys.stderr)
        return 2
    session = dev_session()
    base_url = os.environ.get("ERMIS_DEV_URL") or session.get("url") or "http://127.0.0.1:3000"
    secret = os.environ.get("CRON_SECRET") or session.get("cronSecret")
    try:
        response = asyncio.run(invoke_cron(base_url, entry, secret))
    except httpx.HTTPError as error:
        print(
            f"error: cannot reach the dev server at {base_url} ({error}); is scripts/dev running?",
            file=sys.stderr,
        )
        return 1
    print(f"{entry.name} GET {entry.path} -> {response.status_code}")
    print(response.text)
    return 0 if response.is_success else 1


if __name__ == "__main__":
    raise SystemExit(main())
