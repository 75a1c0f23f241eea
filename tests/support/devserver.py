"""``scripts/dev`` as a subprocess for tests: started with its own data directory and port,
its output captured line by line, stopped with SIGTERM, and checked for leftover daemons."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

from lib.local.paths import PROJECT_ROOT
from lib.local.services import free_port

STARTUP_SECONDS = 120
STOP_SECONDS = 60  # SIGTERM to exit: the streams end at once, the embedded services stop in seconds
SERVICE_PROCESS_NAMES = {"postgres", "redis-server"}
# Unless a test names its own, the dev server's cron clock starts just after the 03:30 crons and a
# refresh (every 10 minutes), so nothing is scheduled for nine minutes: a cron firing on the wall
# clock mid-test did work of its own (with the pipeline flag on, a refresh published an ingest
# message whose failed deliveries joined the retries a console test counted).
QUIET_CRON_CLOCK = "2026-01-01T03:30:30+00:00"


@dataclass
class DevServer:
    url: str
    database_url: str
    env: dict[str, str]
    lines: queue.Queue[str]
    seen: list[str]
    process: subprocess.Popen | None = None

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        regex = re.compile(pattern)
        for line in self.seen:
            if match := regex.search(line):
                return match
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(line)
            if match := regex.search(line):
                return match
        raise AssertionError(f"no line matching {pattern!r}; output so far:\n" + "\n".join(self.seen))

    def execute(self, sql: str, params: tuple = ()) -> None:
        """One statement on the server's database (autocommit): a row written as a writer would."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(sql, params)


def script_env(data_dir: Path, port: int, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CRON_SECRET", "CLERK_JWT_KEY", "ERMIS_QUEUE_SIGNING_SECRET"}
    }
    env.update(ERMIS_DEV_DATA_DIR=str(data_dir), PORT=str(port), PYTHONUNBUFFERED="1", **extra)
    return env


def service_pids(under: Path) -> set[int]:
    """Running database daemons (a postmaster or redis-server detached to init), not backends,
    and not the zombies a container's init may leave unreaped, whose data is ``under`` a
    directory (by their working directory or arguments: other tests run beside this one)."""
    pids = set()
    for proc in psutil.process_iter(["name", "ppid", "status", "cmdline"]):
        if (
            proc.info["name"] not in SERVICE_PROCESS_NAMES
            or proc.info["ppid"] != 1
            or proc.info["status"] == psutil.STATUS_ZOMBIE
        ):
            continue
        with contextlib.suppress(psutil.Error):
            if str(under) in proc.cwd() or any(str(under) in arg for arg in proc.info["cmdline"] or ()):
                pids.add(proc.pid)
    return pids


@contextmanager
def running_dev_server(data_dir: Path, *args: str, port: int | None = None, **extra_env: str) -> Iterator[DevServer]:
    port = port or free_port()
    env = {**script_env(data_dir, port, **extra_env), "PYTHONFAULTHANDLER": "1"}
    if "--cron-clock-start" not in args:
        args = ("--cron-clock-start", QUIET_CRON_CLOCK, *args)
    process = subprocess.Popen(
        [str(PROJECT_ROOT / "scripts/dev"), *args],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in process.stdout], daemon=True)
    reader.start()
    server = DevServer(f"http://127.0.0.1:{port}", "", env, lines, [], process)
    try:
        server.database_url = server.wait_for(r"embedded Postgres: (\S+)", STARTUP_SECONDS).group(1)
        server.wait_for(r"^serving http://", STARTUP_SECONDS)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_SECONDS)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            # Where it hangs: faulthandler (on through the environment) prints every thread's
            # stack on SIGABRT, into the output the failure shows.
            process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            process.kill()
            for pid in service_pids(data_dir):  # its embedded services, which it did not stop
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
        # The reader ends at the pipe's end; then the pipe is closed, not left to the collector.
        reader.join(timeout=10)
        process.stdout.close()
        if hung:
            server.seen.extend(_drain(lines))
            raise AssertionError(
                f"scripts/dev did not stop within {STOP_SECONDS} s of SIGTERM; its output:\n" + "\n".join(server.seen)
            )


def _drain(lines: queue.Queue[str]) -> list[str]:
    drained = []
    while not lines.empty():
        drained.append(lines.get_nowait())
    return drained


def run_script(server: DevServer, script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run one of scripts/ the way a developer would, in the dev server's environment."""
    return subprocess.run(
        [str(PROJECT_ROOT / "scripts" / script), *args],
        cwd=PROJECT_ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def dev_token(server: DevServer, *args: str) -> str:
    result = run_script(server, "dev-token", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()
