"""Realtime fan-out: 1,000 concurrent notification + feed streams over 10 tenants on one
uvicorn process, with every stream read shared (this bundle) and with sharing off (the spec's
design: one query per read per connection per tick), side by side in one run.

The server (``VercelRouter`` over ``api/``) runs in this process on a thread; the 1,000 clients
run in a child process, so this process's resident memory is the server's. Measured per
design: database statements per poll window (psycopg's ``execute`` counted), delivery latency
from an alert's insert to its frame at every connection of its tenant (p50, p99), and resident
memory per idle connection. Targets: statements per window independent of the connection count
(at most reads x tenants/users), p99 within one poll interval + 250 ms, under 64 KB per
connection.

Run: ``.venv/bin/python -m benchmarks.stream_fanout`` (about two minutes).
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter

import psutil
import psycopg

from benchmarks.services import benchmark_services, counting_statements
from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.local.paths import PROJECT_ROOT
from lib.local.server import VercelRouter
from lib.settings import get_settings
from lib.streams import sse
from tests.support.servers import serve_in_thread

TENANTS = 10
CONNECTIONS = 1000  # half notification streams, half feed streams
POLL_MS = 1000
MEASURE_SECONDS = 10
CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import httpx

    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    base, seconds = sys.argv[1], float(sys.argv[2])
    tokens = json.loads(sys.stdin.readline())
    latencies, opened = [], 0

    async def stream(path, token):
        global opened
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(30, read=None)) as client:
            async with client.stream("GET", path, headers=headers) as response:
                opened += 1
                event = None
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "alert.triggered":
                        payload = json.loads(line[6:])
                        if payload["title"].startswith("bench:") and not payload["initial"]:
                            latencies.append(time.time() - float(payload["title"][6:]))

    async def main():
        tasks = [asyncio.create_task(stream(path, token)) for path, token in tokens]
        while opened < len(tasks):
            await asyncio.sleep(0.1)
        print("OPEN", flush=True)
        await asyncio.sleep(seconds)
        print("LATENCIES " + json.dumps(latencies), flush=True)
        for task in tasks:
            task.cancel()

    asyncio.run(main())
    """
)


def tokens(private_pem: str) -> list[tuple[str, str]]:
    result = []
    for index in range(CONNECTIONS):
        tenant = f"org_{index % TENANTS}"
        token = mint_session_token(
            private_pem, {"sub": f"user_{index % (TENANTS * 5)}", "org_id": tenant, "org_role": "org:owner"}, 3600
        )
        result.append(("/api/notifications/events" if index % 2 == 0 else "/api/feed/events", token))
    return result


def run_design(base_url: str, database_url: str, shared: bool, private_pem: str, statements: Counter) -> dict:
    statements.clear()
    window = sse.StreamTiming.share_window_s
    if not shared:
        sse.StreamTiming.share_window_s = property(lambda self: 0.0)  # type: ignore[method-assign]
    server_process = psutil.Process()
    rss_before = server_process.memory_info().rss
    child = subprocess.Popen(
        [sys.executable, "-c", CLIENT, base_url, str(MEASURE_SECONDS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )
    try:
        child.stdin.write(json.dumps(tokens(private_pem)) + "\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "OPEN"
        time.sleep(2 * POLL_MS / 1000)  # let every connection finish its connect-time reads
        rss_open = server_process.memory_info().rss
        statements.clear()
        started = time.time()
        with psycopg.connect(database_url, autocommit=True) as conn:
            for second in range(MEASURE_SECONDS - 4):
                for tenant in range(TENANTS):
                    conn.execute(
                        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
                        " VALUES (%s, %s, 'r', %s, %s, 'info', 'in-app')",
                        (
                            alert_id := f"bench-{shared}-{second}-{tenant}",
                            f"org_{tenant}",
                            alert_id,
                            f"bench:{time.time()}",
                        ),
                    )
                time.sleep(random.uniform(0.5, 1.5))  # inserts at every phase of the poll cycle
        windows = (time.time() - started) / (POLL_MS / 1000)
        measured_statements = statements["all"]
        latencies = json.loads(child.stdout.readline().split(" ", 1)[1])
    finally:
        child.wait(timeout=60)
        sse.StreamTiming.share_window_s = window  # type: ignore[method-assign]
    latencies.sort()
    return {
        "statements_per_window": measured_statements / windows,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "deliveries": len(latencies),
        "kb_per_connection": (rss_open - rss_before) / 1024 / CONNECTIONS,
    }


def main() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    os.environ.update(
        ERMIS_SSE_POLL_INTERVAL_MS=str(POLL_MS), ERMIS_SSE_MAX_DURATION_S="600", ERMIS_DB_POOL_MAX_SIZE="10"
    )
    with benchmark_services() as (database_url, _):
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                "TRUNCATE alert_history, notifications, review_status_events, delivery_logs, editorial_story_drafts"
            )
        private_pem, public_pem = ensure_dev_key_pair(PROJECT_ROOT / ".data" / "bench-keys")
        os.environ["CLERK_JWT_KEY"] = public_pem
        get_settings.cache_clear()
        with counting_statements() as statements, serve_in_thread(VercelRouter(PROJECT_ROOT)) as base_url:
            results = {
                "shared reads (this bundle)": run_design(base_url, database_url, True, private_pem, statements),
                "one read per connection (spec)": run_design(base_url, database_url, False, private_pem, statements),
            }
    print(
        f"{CONNECTIONS} streams ({CONNECTIONS // 2} notifications + {CONNECTIONS // 2} feed) over {TENANTS} tenants,"
        f" poll {POLL_MS} ms"
    )
    for name, result in results.items():
        print(
            f"{name:32} {result['statements_per_window']:8.1f} statements/window  p50 {result['p50_ms']:6.0f} ms"
            f"  p99 {result['p99_ms']:6.0f} ms  ({result['deliveries']} deliveries)"
            f"  {result['kb_per_connection']:5.1f} KB/connection"
        )


if __name__ == "__main__":
    main()
