"""The write tax: what the streams cost every writer in the product, with 1, 20 and 80 stream
processes attached, as ratios of the same writers with no stream machinery at all (issue 36).

8 writers (one process, 8 connections) each commit one alert per transaction for ``WRITE_S``,
either each on its own tenant or all on one tenant (one hot channel). Designs, one run:

- **bare** — every trigger of ``alert_history`` disabled: the writers alone. Measured right
  after each design in the same state (the same processes or connections attached), and each
  design's ratio is to its own bare: this machine's speed drifts by 15 % within minutes.
- **before: commit-time positions + pg_notify** — the triggers of migrations 0010 to 0012 as they
  were (re-created here for the run): a notification per row and an advisory lock per channel
  at commit. Stream processes are made as ``LISTEN`` connections on the channel, drained by a
  helper process — as each process held one; 80 real processes of that design would also need
  80 more connections than this Postgres allows.
- **commit-time positions, no pg_notify** — the alternative without the notification: the
  positioning trigger of 0012 alone.
- **shipped: positioned after commit** — the log row only (migration 0016), with **real**
  ``scripts/serve`` processes (``lib.local.serve``), each holding one open notification stream:
  one of them detects and positions, all of them subscribe on Redis.

Logical decoding (the other way to read changes once per deployment) needs ``wal_level =
logical``; this Postgres runs ``replica`` and changing it needs a restart, so it is not measured.

Also counted: Postgres connections held for change detection (``ermis-change-detector`` for the
shipped design, the ``LISTEN`` connections before) and every connection the stream processes
hold. Run: ``.venv/bin/python -m benchmarks.write_tax`` (about ten minutes; ``--shipped-only``
skips the designs before; ``--detect-interval-ms N`` adds the shipped design with one process
whose detector runs a round every N ms, ``ERMIS_STREAM_DETECT_INTERVAL_MS``, default 5).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psutil
import psycopg

from benchmarks.services import benchmark_services, option_value, settings_env
from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.local.paths import PROJECT_ROOT
from lib.settings import MAX_STREAM_DURATION_S
from tests.support.servers import free_port

WRITERS = 8
WRITE_S = 6.0
PROCESS_COUNTS = (1, 20, 80)
TENANCY = ("own tenants", "one tenant")

WRITER = textwrap.dedent(
    """
    import asyncio, sys, time, uuid
    import psycopg

    database_url, writers, seconds, one_tenant = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"

    async def write(index, until):
        tenant = "org_hot" if one_tenant else f"org_{index}"
        commits = 0
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            while time.monotonic() < until:
                alert = uuid.uuid4().hex
                await conn.execute(
                    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
                    " VALUES (%s, %s, 'r', %s, 'info', 'in-app')",
                    (alert, tenant, alert),
                )
                commits += 1
        return commits

    async def main():
        until = time.monotonic() + seconds
        print(sum(await asyncio.gather(*(write(index, until) for index in range(writers)))) / seconds)

    asyncio.run(main())
    """
)

LISTENERS = textwrap.dedent(
    """
    import sys, select, psycopg
    database_url, count = sys.argv[1], int(sys.argv[2])
    conns = [psycopg.connect(database_url, autocommit=True, application_name="bench-listen") for _ in range(count)]
    for conn in conns:
        conn.execute("LISTEN ermis_changes")
    print("LISTENING", flush=True)
    while True:  # drain every connection, as each process's listener did
        ready, _, _ = select.select([conn.fileno() for conn in conns] + [sys.stdin.fileno()], [], [], 1.0)
        if sys.stdin.fileno() in ready:
            break
        for conn in conns:
            if conn.fileno() in ready:
                for _ in conn.notifies(timeout=0, stop_after=10_000):
                    pass
    """
)

# 0010-0012's stream triggers on alert_history as they were, over 0016's table.
BEFORE_SQL = """
ALTER TABLE stream_changes ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX bench_unpositioned_xid_idx ON stream_changes (xid) WHERE position IS NULL;
CREATE FUNCTION bench_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ermis_changes', 'alerts|' || left(lower(btrim(NEW.tenant_scope_id)), 200));
    RETURN NULL;
END $$;
CREATE FUNCTION bench_position_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE channel_hash int;
BEGIN
    IF (SELECT position FROM stream_changes WHERE id = NEW.id) IS NOT NULL THEN RETURN NULL; END IF;
    FOR channel_hash IN SELECT DISTINCT hashtext(channel) AS h FROM stream_changes
        WHERE xid = pg_current_xact_id() AND position IS NULL ORDER BY h
    LOOP
        PERFORM pg_advisory_xact_lock(1163022163, channel_hash);
    END LOOP;
    UPDATE stream_changes c SET position = drawn.position FROM (
        SELECT id, nextval('stream_position_seq') AS position FROM (
            SELECT id FROM stream_changes WHERE xid = pg_current_xact_id() AND position IS NULL ORDER BY id) mine
    ) drawn WHERE c.id = drawn.id;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER bench_position AFTER INSERT ON stream_changes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_position_at_commit();
"""
BEFORE_NOTIFY_SQL = """
CREATE TRIGGER bench_notify AFTER INSERT OR UPDATE ON alert_history
    FOR EACH ROW EXECUTE FUNCTION bench_notify_change();
"""
RESTORE_SQL = """
DROP TRIGGER IF EXISTS bench_notify ON alert_history;
DROP TRIGGER IF EXISTS bench_position ON stream_changes;
DROP FUNCTION IF EXISTS bench_notify_change();
DROP FUNCTION IF EXISTS bench_position_at_commit();
ALTER TABLE stream_changes DROP COLUMN IF EXISTS xid;
"""


def execute(database_url: str, sql: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql)


def write_rate(database_url: str, one_tenant: bool) -> float:
    execute(database_url, "TRUNCATE alert_history, stream_changes")
    output = subprocess.run(
        [sys.executable, "-c", WRITER, database_url, str(WRITERS), str(WRITE_S), "1" if one_tenant else "0"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(output.strip())


def connections_by_name(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() GROUP BY 1"
        ).fetchall()
    return {name or "(unnamed)": count for name, count in rows}


@contextmanager
def listening_connections(database_url: str, count: int) -> Iterator[None]:
    helper = subprocess.Popen(
        [sys.executable, "-c", LISTENERS, database_url, str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert helper.stdout is not None and helper.stdout.readline().strip() == b"LISTENING"
        yield
    finally:
        assert helper.stdin is not None
        helper.stdin.write(b"\n")
        helper.stdin.close()
        helper.wait(timeout=30)


def open_stream(port: int, token: str) -> socket.socket:
    """One notification stream on the process at ``port``, read up to its first frame."""
    deadline = time.monotonic() + 120
    while True:
        try:
            stream = socket.create_connection(("127.0.0.1", port), timeout=60)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    stream.sendall(
        f"GET /api/notifications/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    received = b""
    while b"\r\n\r\n" not in received.split(b"\r\n\r\n", 1)[-1]:  # the head, then a first frame
        chunk = stream.recv(65536)
        if not chunk:
            raise RuntimeError(f"the stream process on {port} closed: {received[:200]!r}")
        received += chunk
    return stream


def read_and_discard(streams: list[socket.socket], stop: threading.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError, ValueError):
            ready, _, _ = select.select(streams, [], [], 0.5)
            for stream in ready:
                stream.recv(1 << 16)


@contextmanager
def stream_processes(count: int, *, token: str) -> Iterator[list[subprocess.Popen]]:
    ports = [free_port("127.0.0.1") for _ in range(count)]
    # One user's stream on every process: the per-user cap (12) would refuse the thirteenth.
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "ERMIS_DB_POOL_MAX_SIZE": "1",
        "ERMIS_STREAMS_PER_USER": "1000",
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "lib.local.serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for port in ports
    ]
    streams: list[socket.socket] = []
    stop = threading.Event()
    try:
        streams = [open_stream(port, token) for port in ports]
        drain = threading.Thread(target=read_and_discard, args=(streams, stop), daemon=True)
        drain.start()  # a browser reads its frames: a stream never waits on a full socket
        time.sleep(5)  # every process subscribed, one leading
        yield processes
    finally:
        stop.set()
        for stream in streams:
            stream.close()
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


def cpu_seconds(processes: list[subprocess.Popen]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(process.pid).cpu_times()
            total += times.user + times.system
    return total


def measure(
    database_url: str,
    design: str,
    results: dict[str, dict[str, tuple[float, float]]],
    processes: list[subprocess.Popen] | None = None,
    cores: dict[str, dict[str, float]] | None = None,
) -> None:
    """The writers' rate with the stream machinery as it is now, and bare — every trigger of
    ``alert_history`` disabled — right after, in the same state (the same processes attached):
    the machine's speed drifts by 15 % within minutes, so each ratio pairs its own bare. With
    ``processes``, the cores they used while the writers ran (into ``cores``): on this machine
    they share the 2 cores with Postgres and the writers, where in production they run apart."""
    with_streams = {}
    for tenancy in TENANCY:
        before, started = cpu_seconds(processes or []), time.monotonic()
        with_streams[tenancy] = write_rate(database_url, tenancy == "one tenant")
        if processes and cores is not None:
            used = (cpu_seconds(processes) - before) / (time.monotonic() - started)
            cores.setdefault(design, {})[tenancy] = used
    execute(database_url, "ALTER TABLE alert_history DISABLE TRIGGER USER")
    try:
        bare = {tenancy: write_rate(database_url, tenancy == "one tenant") for tenancy in TENANCY}
    finally:
        execute(database_url, "ALTER TABLE alert_history ENABLE TRIGGER USER")
    results[design] = {tenancy: (with_streams[tenancy], bare[tenancy]) for tenancy in TENANCY}
    print(design, json.dumps(results[design]), flush=True)


def measure_attached(
    database_url: str,
    design: str,
    attached: Callable[[int], contextlib.AbstractContextManager[list[subprocess.Popen] | None]],
    results: dict[str, dict[str, tuple[float, float]]],
    held: dict[str, dict[str, int]],
    cores: dict[str, dict[str, float]],
) -> None:
    """``measure`` with each count of stream processes (or listening connections) attached, and
    the connections Postgres holds meanwhile."""
    for count in PROCESS_COUNTS:
        with attached(count) as processes:
            label = f"{design}, {count} attached"
            held[label] = connections_by_name(database_url)
            measure(database_url, label, results, processes, cores)


def main() -> None:
    with benchmark_services() as (database_url, _):
        private_pem, public_pem = ensure_dev_key_pair(PROJECT_ROOT / ".data" / "bench-keys")
        os.environ["CLERK_JWT_KEY"] = public_pem
        os.environ["ERMIS_SSE_MAX_DURATION_S"] = str(MAX_STREAM_DURATION_S)  # longer than a count's measures
        token = mint_session_token(private_pem, {"sub": "user_bench", "org_id": "org_0", "org_role": "org:owner"}, 7200)
        results: dict[str, dict[str, tuple[float, float]]] = {}
        held: dict[str, dict[str, int]] = {}
        cores: dict[str, dict[str, float]] = {}

        if "--shipped-only" not in sys.argv[1:]:
            execute(database_url, BEFORE_SQL)
            try:
                measure(database_url, "commit-time positions, no pg_notify, 0 processes", results)
                execute(database_url, BEFORE_NOTIFY_SQL)
                measure(database_url, "before: commit-time positions + pg_notify, 0 processes", results)
                attached = functools.partial(listening_connections, database_url)
                measure_attached(
                    database_url, "before: commit-time positions + pg_notify", attached, results, held, cores
                )
            finally:
                execute(database_url, RESTORE_SQL)

        measure(database_url, "shipped: positioned after commit, 0 processes", results)
        attached = functools.partial(stream_processes, token=token)
        measure_attached(database_url, "shipped: positioned after commit", attached, results, held, cores)
        if (interval_ms := option_value("--detect-interval-ms")) is not None:
            with settings_env({"ERMIS_STREAM_DETECT_INTERVAL_MS": interval_ms}), attached(1) as processes:
                label = f"shipped, the detector's round every {interval_ms} ms, 1 attached"
                measure(database_url, label, results, processes, cores)

    print(f"\n{WRITERS} writers, one alert per transaction, {WRITE_S:.0f} s each; each design against its own bare")
    print(f"| design | {' | '.join(TENANCY)} |")
    print(f"|---|{'---|' * len(TENANCY)}")
    for design, by_tenancy in results.items():
        cells = " | ".join(
            f"**{rate / bare:.2f}x** ({rate:.0f}/s of {bare:.0f}/s)" for rate, bare in by_tenancy.values()
        )
        print(f"| {design} | {cells} |")
    print("\ncores the stream processes used while the writers ran (of the machine's 2):")
    for design, by_tenancy in cores.items():
        print(f"- {design}: " + ", ".join(f"{tenancy} {used:.2f}" for tenancy, used in by_tenancy.items()))
    print("\nconnections held (application_name: count), with the processes attached:")
    for state, by_name in held.items():
        print(f"- {state}: {json.dumps(by_name)}")


if __name__ == "__main__":
    main()
