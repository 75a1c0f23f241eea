"""Realtime fan-out: 1,000 concurrent notification + feed streams over 10 tenants on one
uvicorn process, with the **default** stream intervals, pushed (the change detector and the
Redis change bus, this bundle) and polled (the bus unreachable: every read shared per audience and aligned to
the clock, as before push), side by side in one run.

The server (``VercelRouter`` over ``api/``) runs in this process on a thread; the clients run in
a child process, so this process's resident memory is the server's. Per design: database
statements per minute while nothing changes and while one alert per tenant per second arrives
(psycopg's ``execute`` counted), insert → frame latency at every connection of the tenant (p50,
p99), and resident memory per idle stream. The changes arrive two ways, a minute each:
*lockstep* — every tenant's alert in the same instant, once a second, so each change lands
behind the other tenants' fan-out (the worst case for one process) — and *independent* — each
tenant on its own clock, one alert a second at a random moment in it, as tenants are.
``--detect-interval-ms N`` adds the one-process design with the change detector's round every N
ms (``ERMIS_STREAM_DETECT_INTERVAL_MS``; default 5): what a shorter interval buys in latency
(its cost to the writers: ``benchmarks/write_tax.py --detect-interval-ms N``).
``--moonshot`` holds 10,000 idle streams (pushed) and reports the same memory and idle figures.
Targets (issue 13): p99 ≤ 100 ms at 1,000 streams, idle statements at least 10 times fewer
than polling, ≤ 32 KB per idle stream, 10,000 idle streams held.

Run: ``.venv/bin/python -m benchmarks.stream_fanout`` (about eleven minutes; ``--pushed-only``
skips the polled design), and
``.venv/bin/python -m benchmarks.stream_fanout --moonshot``.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import textwrap
import time
import timeit
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import psycopg

from benchmarks.services import benchmark_services, counting_statements, option_value, settings_env, use_change_bus
from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.local.paths import PROJECT_ROOT
from lib.local.server import VercelRouter
from lib.settings import MAX_STREAM_DURATION_S
from tests.support.fleet import serve_processes
from tests.support.servers import free_port, serve_in_thread

TENANTS = 10
CONNECTIONS = 1000  # half notification streams, half feed streams
MOONSHOT_CONNECTIONS = 10_000
SETTLE_S = 12  # every connection's first reads, and a poll or two
FIRST_SETTLE_S = 6  # the first batch's reads: what is loaded once (apps, pools) is loaded by then
IDLE_S = 60  # one safety-net period of the pushed design
ACTIVE_S = 60  # long enough for the server's rarer full collections to land in it
STREAM_TABLES = "alert_history, notifications, review_status_events, delivery_logs, editorial_story_drafts"
CONNECT_BATCH = 250  # streams opened at once by the client: a browser fleet connects over time
CLIENT = textwrap.dedent(
    """
    import asyncio, gc, json, re, sys, time
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    host, ports, seconds, batch = sys.argv[1], sys.argv[2].split(","), float(sys.argv[3]), int(sys.argv[4])
    streams = json.loads(sys.stdin.readline())
    latencies, ended = {}, 0
    LIVE_BENCH_ALERT = re.compile(rb'"title":"bench:([a-z]+):([0-9.]+)"[^\\n]*"initial":false')

    async def stream(path, token, ready, port):
        # A bare HTTP/1.1 reader, not httpx: the clients share the server's two cores, and
        # every cycle they spend parsing is one the server cannot spend sending.
        global ended
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"GET {path} HTTP/1.1\\r\\nHost: {host}\\r\\nAuthorization: Bearer {token}\\r\\n\\r\\n".encode()
        )
        await reader.readuntil(b"\\r\\n\\r\\n")
        ready.set_result(None)
        while chunk := await reader.read(65536):
            received = time.time()
            for arrivals, sent in LIVE_BENCH_ALERT.findall(chunk):
                latencies.setdefault(arrivals.decode(), []).append(received - float(sent))
        ended += 1  # the server closed it before the run was over

    async def main():
        tasks = []
        for start in range(0, len(streams), batch):
            ready = [asyncio.get_running_loop().create_future() for _ in streams[start : start + batch]]
            tasks += [
                asyncio.create_task(stream(p, t, r, ports[(start + i) % len(ports)]))
                for i, ((p, t), r) in enumerate(zip(streams[start : start + batch], ready))
            ]
            await asyncio.wait_for(asyncio.gather(*ready), 120)
            if start == 0:  # the server measures its memory with one batch open, then the rest
                print("FIRST", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        print("OPEN", flush=True)
        gc.disable()  # the measuring side's own collector pauses are not the server's latency
        await asyncio.sleep(seconds)
        print("RESULT " + json.dumps({"latencies": latencies, "ended": ended}), flush=True)
        for task in tasks:
            task.cancel()

    asyncio.run(main())
    """
)

WRITER = textwrap.dedent(
    """
    import random, sys, time
    import psycopg

    database_url, seconds, tenants, arrivals = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with psycopg.connect(database_url, autocommit=True) as conn:
        start = time.monotonic()
        for second in range(seconds):
            if arrivals == "lockstep":  # every tenant at once, then a pause of about a second
                offsets = [0.0] * tenants
            else:  # each tenant on its own clock: one change a second, at its own moment in it
                offsets = [random.random() for _ in range(tenants)]
            for offset, tenant in sorted(zip(offsets, range(tenants))):
                time.sleep(max(0.0, start + second + offset - time.monotonic()))
                alert_id = f"bench-{arrivals}-{second}-{tenant}"
                conn.execute(
                    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
                    " VALUES (%s, %s, 'r', %s, %s, 'info', 'in-app')",
                    (alert_id, f"org_{tenant}", alert_id, f"bench:{arrivals}:{time.time()}"),
                )
    """
)
ARRIVALS = ("lockstep", "independent")


def tokens(private_pem: str, connections: int) -> list[tuple[str, str]]:
    """50 users over 10 tenants, one token each (signing is slow: 10,000 would take minutes)."""
    minted: dict[int, str] = {}
    result = []
    for index in range(connections):
        user = index % (TENANTS * 5)
        if user not in minted:
            claims = {"sub": f"user_{user}", "org_id": f"org_{user % TENANTS}", "org_role": "org:owner"}
            minted[user] = mint_session_token(private_pem, claims, 3600)
        result.append(("/api/notifications/events" if index % 2 == 0 else "/api/feed/events", minted[user]))
    return result


@contextmanager
def stream_servers(processes: int) -> Iterator[list[int]]:
    """One server in this process on a thread (as ``scripts/serve``, collector tuned: its
    statements and memory are measured here), or ``processes`` real ``scripts/serve`` processes."""
    if processes == 1:
        with serve_in_thread(VercelRouter(PROJECT_ROOT), tune_collector=True) as base_url:
            yield [int(base_url.rsplit(":", 1)[1])]
        return
    ports = [free_port() for _ in range(processes)]
    with serve_processes(ports, ERMIS_DB_POOL_MAX_SIZE="4"):
        yield ports


def run_design(
    database_url: str,
    pushed: bool,
    private_pem: str,
    statements: Counter,
    connections: int,
    active: bool,
    processes: int = 1,
) -> dict:
    use_change_bus(pushed)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {STREAM_TABLES}")
    server_process = psutil.Process()
    seconds = SETTLE_S + IDLE_S + (len(ARRIVALS) * (ACTIVE_S + 2) + 3 if active else 0)
    with stream_servers(processes) as ports:
        child = subprocess.Popen(
            [sys.executable, "-c", CLIENT, "127.0.0.1", ",".join(map(str, ports)), str(seconds), str(CONNECT_BATCH)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        )
        try:
            child.stdin.write(json.dumps(tokens(private_pem, connections)) + "\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "FIRST"
            time.sleep(FIRST_SETTLE_S)
            rss_first = server_process.memory_info().rss
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "OPEN"
            time.sleep(SETTLE_S)
            rss_open = server_process.memory_info().rss
            statements.clear()
            time.sleep(IDLE_S)
            idle_per_minute = statements["all"] * 60 / IDLE_S
            active_per_minute = {}
            for arrivals in ARRIVALS if active else ():
                statements.clear()
                # The writer is a process of its own, as in production (a cron, a consumer): in
                # this one it would take the server thread's interpreter lock to write.
                subprocess.run(
                    [sys.executable, "-c", WRITER, database_url, str(ACTIVE_S), str(TENANTS), arrivals],
                    check=True,
                    env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
                )
                active_per_minute[arrivals] = statements["all"] * 60 / ACTIVE_S
                time.sleep(2)  # the last change's frames
            client_result = json.loads(child.stdout.readline().split(" ", 1)[1])
        finally:
            child.wait(timeout=120)
    in_process = processes == 1  # statements and memory are counted in this process only
    result = {
        "idle_statements_per_minute": idle_per_minute if in_process else None,
        "streams_open_at_end": connections - client_result["ended"],
        "kb_per_stream": (rss_open - rss_first) / 1024 / (connections - CONNECT_BATCH) if in_process else None,
    }
    for arrivals, per_minute in active_per_minute.items():
        latencies = sorted(client_result["latencies"].get(arrivals, []))
        result[arrivals] = {
            "statements_per_minute": per_minute if in_process else None,
            "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
            "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else None,
            "deliveries": len(latencies),
        }
    return result


def host_speed_us() -> float:
    """Microseconds for ``sum(range(1000))`` (best of five): latency is in absolute time, and
    the same machine has measured 14 and 35 µs on different days (its neighbours' load), so a run
    states how fast its host was."""
    return min(timeit.repeat("sum(range(1000))", number=20_000, repeat=5)) / 20_000 * 1e6


def main() -> None:
    moonshot = "--moonshot" in sys.argv[1:]
    speed_before = host_speed_us()
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    # 20 streams per user (1,000 over 50 users) and 100 per tenant: above the default caps.
    os.environ.update(
        ERMIS_SSE_MAX_DURATION_S=str(MAX_STREAM_DURATION_S),  # a design's streams stay open its ~4 minutes
        ERMIS_DB_POOL_MAX_SIZE="10",
        ERMIS_STREAMS_PER_USER="100",
        ERMIS_STREAMS_PER_TENANT="10000",
    )
    os.environ.pop("ERMIS_SSE_POLL_INTERVAL_MS", None)  # the default intervals: feed 4 s, notifications 5 s
    with benchmark_services() as (database_url, _):
        private_pem, public_pem = ensure_dev_key_pair(PROJECT_ROOT / ".data" / "bench-keys")
        os.environ["CLERK_JWT_KEY"] = public_pem
        with counting_statements() as statements:
            if moonshot:
                designs = {"pushed, idle": (True, MOONSHOT_CONNECTIONS, False, 1)}
            else:
                designs = {
                    "pushed (change bus)": (True, CONNECTIONS, True, 1),
                    "pushed, the same streams over 4 processes": (True, CONNECTIONS, True, 4),
                    **(
                        {}
                        if "--pushed-only" in sys.argv[1:]
                        else {"polled (shared reads, before)": (False, CONNECTIONS, True, 1)}
                    ),
                }
            results = {
                name: run_design(database_url, pushed, private_pem, statements, connections, active, processes)
                for name, (pushed, connections, active, processes) in designs.items()
            }
            if (interval_ms := option_value("--detect-interval-ms")) is not None:
                name = f"pushed, detector every {interval_ms} ms"
                with settings_env({"ERMIS_STREAM_DETECT_INTERVAL_MS": interval_ms}):
                    results[name] = run_design(database_url, True, private_pem, statements, CONNECTIONS, True)
                # This process's heap already grew for the first design's streams: not measured again.
                results[name]["kb_per_stream"] = None
    connections = MOONSHOT_CONNECTIONS if moonshot else CONNECTIONS
    print(f"{connections} streams (half notifications, half feed) over {TENANTS} tenants, default intervals")
    print(f"host: sum(range(1000)) in {speed_before:.1f} µs before the run, {host_speed_us():.1f} µs after")
    for name, result in results.items():
        print(f"{name}: {json.dumps(result)}")


if __name__ == "__main__":
    main()
