"""A burst through the notification stream: one statement inserts 10,000 alerts for a tenant
with 100 notification streams open (20 users, 5 tabs each) on one uvicorn process; every
stream must receive all 10,000, in pages (issue 20). Pushed (the change detector positions the
burst after its commit and tells the streams over Redis) and polled (the change bus unreachable,
the default 5 s interval), side by side in one run.

Per design: time from the insert's commit to the last alert frame at each stream (p50 and the
slowest stream), and the database statements the server made for the burst — against the
pages a burst takes (``ceil(10,000 / PAGE_SIZE)``): reads are shared per channel position, so
the goal is one paged read per audience, not one per stream (100 streams, 50 pages each: 5,000).

Run: ``.venv/bin/python -m benchmarks.stream_burst`` (about a minute).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter

import psycopg

from benchmarks.services import benchmark_services, counting_statements, use_change_bus
from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.local.paths import PROJECT_ROOT
from lib.local.server import VercelRouter
from lib.settings import MAX_STREAM_DURATION_S
from lib.streams.notification_reads import PAGE_SIZE
from tests.support.servers import serve_in_thread

STREAMS = 100
USERS = 20
BURST = 10_000
TENANT = "org_burst"
DESIGNS = {"pushed (change bus)": True, "polled (change bus unreachable)": False}
CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    host, port, expected = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    streams = json.loads(sys.stdin.readline())
    ALERT = b"event: alert.triggered"
    done_at = {}

    async def stream(index, path, token, ready):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET {path} HTTP/1.1\\r\\nHost: {host}\\r\\nAuthorization: Bearer {token}\\r\\n\\r\\n".encode())
        await reader.readuntil(b"\\r\\n\\r\\n")
        ready.set_result(None)
        seen, tail = 0, b""
        while chunk := await reader.read(65536):
            window = tail + chunk  # a pattern split between two reads is counted once, whole
            seen += window.count(ALERT)
            tail = window[-(len(ALERT) - 1):]
            if seen >= expected:
                done_at[index] = time.time()
                break
        writer.close()

    async def main():
        ready = [asyncio.get_running_loop().create_future() for _ in streams]
        tasks = [asyncio.create_task(stream(i, p, t, r)) for i, ((p, t), r) in enumerate(zip(streams, ready))]
        await asyncio.wait_for(asyncio.gather(*ready), 60)
        print("OPEN", flush=True)
        await asyncio.wait(tasks, timeout=120)
        print("RESULT " + json.dumps(done_at), flush=True)

    asyncio.run(main())
    """
)


def run_design(database_url: str, pushed: bool, private_pem: str, statements: Counter) -> dict:
    use_change_bus(pushed)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE alert_history")
    tokens = [
        mint_session_token(private_pem, {"sub": f"user_{n}", "org_id": TENANT, "org_role": "org:member"}, 3600)
        for n in range(USERS)
    ]
    streams = [("/api/notifications/events", tokens[n % USERS]) for n in range(STREAMS)]
    with serve_in_thread(VercelRouter(PROJECT_ROOT), tune_collector=True) as base_url:
        host, port = base_url.removeprefix("http://").split(":")
        child = subprocess.Popen(
            [sys.executable, "-c", CLIENT, host, port, str(BURST)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            child.stdin.write(json.dumps(streams) + "\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "OPEN"
            time.sleep(6)  # every stream connected and past its first read (the poll: 5 s)
            statements.clear()
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
                    " SELECT 'burst-' || n, %s, 'r', n::text, 'burst', 'info', 'in-app'"
                    " FROM generate_series(1, %s) AS n",
                    (TENANT, BURST),
                )
                committed = time.time()
            done_at = json.loads(child.stdout.readline().split(" ", 1)[1])
            burst_statements = statements["all"]
        finally:
            child.wait(timeout=180)
    seconds = sorted(at - committed for at in done_at.values())
    return {
        "streams_complete": len(seconds),
        "commit_to_last_frame_p50_s": round(statistics.median(seconds), 3) if seconds else None,
        "commit_to_last_frame_slowest_s": round(seconds[-1], 3) if seconds else None,
        "statements": burst_statements,
        "pages": math.ceil(BURST / PAGE_SIZE),
    }


def main() -> None:
    os.environ.update(ERMIS_SSE_MAX_DURATION_S=str(MAX_STREAM_DURATION_S), ERMIS_DB_POOL_MAX_SIZE="10")
    os.environ.pop("ERMIS_SSE_POLL_INTERVAL_MS", None)
    with benchmark_services() as (database_url, _):
        private_pem, public_pem = ensure_dev_key_pair(PROJECT_ROOT / ".data" / "bench-keys")
        os.environ["CLERK_JWT_KEY"] = public_pem
        with counting_statements() as statements:
            results = {
                name: run_design(database_url, pushed, private_pem, statements) for name, pushed in DESIGNS.items()
            }
    print(f"{BURST} alerts in one statement to {STREAMS} notification streams of one tenant ({USERS} users)")
    for name, result in results.items():
        print(f"{name}: {json.dumps(result)}")


if __name__ == "__main__":
    main()
