"""npm's ``eventsource`` on the notification stream with its connection cut at random
(``eventsource_client.mjs``), and writers racing it: what the stream tests that hold a standard
client to "every committed row exactly once" share."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from lib.local.paths import PROJECT_ROOT

NODE_EVENTSOURCE = Path(
    os.environ.get("ERMIS_NODE_EVENTSOURCE", PROJECT_ROOT / ".data/toolchain/eventsource-4.1.1/node_modules")
)
EVENTSOURCE_CLIENT = PROJECT_ROOT / "tests/support/eventsource_client.mjs"


@dataclass
class EventSourceRun:
    """What the client printed: one line per event it dispatched and per connection it opened."""

    lines: list[dict] = field(default_factory=list)

    def delivered(self) -> list[str]:
        return [line["id"] for line in list(self.lines) if "event" in line]

    def events(self) -> list[dict]:
        return [line for line in self.lines if "event" in line]

    def connections(self) -> list[dict]:
        return [line for line in self.lines if "open" in line]


@contextmanager
def eventsource_client(url: str, token: str, max_bytes: int = 20000) -> Iterator[EventSourceRun]:
    """The client on ``url``, each connection cut after a random number of bytes up to
    ``max_bytes``; ended on exit."""
    assert (NODE_EVENTSOURCE / "eventsource").is_dir(), "run ./scripts/test: it installs npm's eventsource"
    client = subprocess.Popen(
        ["node", str(EVENTSOURCE_CLIENT), str(NODE_EVENTSOURCE), url, token, str(max_bytes)],
        stdout=subprocess.PIPE,
        text=True,
    )
    run = EventSourceRun()
    assert client.stdout is not None
    reader = threading.Thread(
        target=lambda: [run.lines.append(json.loads(line)) for line in client.stdout], daemon=True
    )
    reader.start()
    try:
        yield run
    finally:
        client.terminate()
        client.wait(timeout=10)
        reader.join(timeout=10)
        client.stdout.close()


async def race_alerts_and_notifications(
    database_url: str, rng: random.Random, until: float, committed: set[str], tenant: str, user: str, writer: int
) -> None:
    """One writer until ``until``: alerts of ``tenant`` and notifications of ``user``, each
    transaction held open a random while as others commit, one in ten rolled back; the ids it
    committed go in ``committed``."""
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        for number in itertools.count():
            if time.monotonic() > until:
                return
            row_id = f"race-{writer}-{number}"
            if rng.random() < 0.5:
                await conn.execute(
                    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
                    " VALUES (%s, %s, 'r', %s, 'info', 'in-app')",
                    (row_id, tenant, row_id),
                )
            else:
                await conn.execute(
                    "INSERT INTO notifications (id, user_id, title, body, type) VALUES (%s, %s, 'T', 'B', 'system')",
                    (row_id, user),
                )
            await asyncio.sleep(rng.uniform(0, 0.4))  # open while others commit
            if rng.random() < 0.1:
                await conn.rollback()
            else:
                await conn.commit()
                committed.add(row_id)
            await asyncio.sleep(rng.uniform(0, 0.4))
