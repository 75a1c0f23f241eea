"""The stream soak: a real ``scripts/serve`` process holding streams that drop and resume by
``Last-Event-ID`` again and again while a writer commits alerts — what each stream got, and the
process's memory over time (``/proc/<pid>/statm``): resident, and mapped for data (its heaps,
anonymous mappings and stack) — resident memory can only grow within what is mapped, so a mapped
size that stays flat bounds a resident size still rising as mapped pages are first touched. The
suite runs it shortened (tests/streams/test_soak.py), the benchmark at length
(benchmarks/stream_soak.py)."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from dataclasses import dataclass, field

import psycopg

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class SoakClient:
    """One browser: the alerts it got (in order, duplicates kept) and its connections."""

    since: float = 0.0  # when its first frame came: alerts committed later are its news
    received: list[str] = field(default_factory=list)
    connections: int = 0
    last_id: str | None = None


@dataclass
class SoakResult:
    clients: list[SoakClient]
    written: list[tuple[float, str]]  # (commit time, alert id)
    memory: list[tuple[float, int, int]]  # (seconds since the start, resident bytes, data bytes)

    def connections(self) -> int:
        return sum(client.connections for client in self.clients)

    def lost_and_doubled(self) -> tuple[int, int]:
        lost = doubled = 0
        for client in self.clients:
            expected = {alert for at, alert in self.written if at > client.since}
            got = set(client.received)
            lost += len(expected - got)
            doubled += len(client.received) - len(got)
        return lost, doubled

    def rss_growth_after(self, warm_up_s: float) -> tuple[int, int]:
        """Resident bytes at the end of the warm-up and the most after it."""
        return self._growth_after(warm_up_s, 1)

    def data_growth_after(self, warm_up_s: float) -> tuple[int, int]:
        """Bytes mapped for data at the end of the warm-up and the most after it."""
        return self._growth_after(warm_up_s, 2)

    def _growth_after(self, warm_up_s: float, column: int) -> tuple[int, int]:
        after = [sample[column] for sample in self.memory if sample[0] >= warm_up_s]
        return after[0], max(after)


def memory_of(pid: int) -> tuple[int, int]:
    """Resident bytes and bytes mapped for data (``VmRSS``, ``VmData``) of process ``pid``."""
    with open(f"/proc/{pid}/statm") as statm:
        _size, resident, _shared, _text, _lib, data, *_ = (int(field) for field in statm.read().split())
    return resident * PAGE_SIZE, data * PAGE_SIZE


async def _hold_then_drop(port: int, token: str, client: SoakClient, hold_s: float) -> None:
    """One connection (HTTP/1.0: the body is the bytes until the close), held ``hold_s``."""
    resume = f"Last-Event-ID: {client.last_id}\r\n" if client.last_id else ""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET /api/notifications/events HTTP/1.0\r\nAuthorization: Bearer {token}\r\n{resume}\r\n".encode()
        )
        buffered = b""
        head_done = False
        async with asyncio.timeout(hold_s):
            while chunk := await reader.read(65536):
                buffered += chunk
                if not head_done:
                    if b"\r\n\r\n" not in buffered:
                        continue
                    head, buffered = buffered.split(b"\r\n\r\n", 1)
                    assert head.startswith(b"HTTP/1.1 200"), head[:100]
                    head_done = True
                    client.connections += 1
                *frames, buffered = buffered.split(b"\r\n\r\n")
                if frames and not client.since:  # its cursor is set: what commits now is news
                    client.since = time.time()
                for frame in frames:
                    fields = dict(line.split(": ", 1) for line in frame.decode().split("\r\n") if ": " in line)
                    if fields.get("event") == "alert.triggered" and '"initial":false' in fields["data"]:
                        client.received.append(fields["data"].split('"id":"', 1)[1].split('"', 1)[0])
                    if "id" in fields:
                        client.last_id = fields["id"]
    except TimeoutError:
        pass
    finally:
        writer.close()


async def soak(
    pid: int,
    port: int,
    database_url: str,
    token: str,
    *,
    streams: int,
    seconds: float,
    hold_s: tuple[float, float],
    alerts_per_s: float,
    tenant: str,
) -> SoakResult:
    """``streams`` clients dropping and resuming every ``hold_s`` for ``seconds`` while alerts of
    ``tenant`` are committed at ``alerts_per_s``; then every client resumes once more and stays
    until it has caught up."""
    clients = [SoakClient() for _ in range(streams)]
    written: list[tuple[float, str]] = []
    memory: list[tuple[float, int, int]] = []
    started = time.monotonic()
    until = started + seconds
    rng = random.Random()

    async def browse(client: SoakClient) -> None:
        while time.monotonic() < until:
            await _hold_then_drop(port, token, client, rng.uniform(*hold_s))

    async def write() -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            for number in itertools.count():
                if time.monotonic() >= until:
                    return
                alert = f"soak-{number}"
                await conn.execute(
                    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
                    " VALUES (%s, %s, 'r', %s, 'info', 'in-app')",
                    (alert, tenant, alert),
                )
                written.append((time.time(), alert))
                await asyncio.sleep(max(0.0, started + (number + 1) / alerts_per_s - time.monotonic()))

    async def sample() -> None:
        while time.monotonic() < until:
            memory.append((time.monotonic() - started, *memory_of(pid)))
            await asyncio.sleep(1.0)

    await asyncio.gather(sample(), write(), *(browse(client) for client in clients))
    await asyncio.gather(*(_hold_then_drop(port, token, client, 3.0) for client in clients))
    return SoakResult(clients, written, memory)
