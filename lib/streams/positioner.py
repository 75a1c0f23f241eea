"""Positions drawn after commit: the one place the stream log's rows get their positions.

A writer only inserts its ``stream_changes`` rows, position ``NULL`` (migration 0016: no
``pg_notify``, no lock another writer takes). A *round* — ``ermis_position_changes``, one
statement in a READ COMMITTED transaction of its own with its own lock and statement timeouts,
one round trip — positions the committed rows still without one, oldest logged first, under one
advisory lock held until its own commit is visible, and answers the channels that advanced with
their new heads. It never waits on a row another transaction holds (migration 0019): such a
row's channel waits for a later round, and every other channel goes on. Rounds never overlap
and each draws above every earlier one, so within a channel nothing becomes visible below a
position a reader has passed; a round sees only committed rows, so a transaction left open
elsewhere holds no stream back.

Who runs rounds:

- the change detector (``detector``), one process of the deployment at a time, every few
  milliseconds while streams are open, on its own connection;
- a read that needs every committed row positioned (``positioned_now``): the REST snapshot and a
  stream's first read — when no stream is open anywhere there is no detector, and a row must not
  wait for one — and every read while push is down. Concurrent callers of a process share one
  round, but never one that began before they asked: a row committed before the call always has
  its position when it returns.

A round that positioned rows outside the detector tells the other processes too (``publish``):
their streams of those channels wake as they would for the detector's.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from lib.db.pool import connection
from lib.lazy_imports import lazy_import

if TYPE_CHECKING:
    from psycopg import AsyncConnection

psycopg_rows = lazy_import("psycopg.rows")
psycopg_pq = lazy_import("psycopg.pq")

ROUND_SIZE = 5000  # rows per round: a bulk import is positioned (and its commit flushed) in steps
ROUND_LOCK_TIMEOUT_MS = 1000  # the advisory lock: another round holds it for milliseconds
ROUND_STATEMENT_TIMEOUT_MS = 10_000
# One round trip, one transaction of the round's own: its isolation level (the function needs READ
# COMMITTED whatever the database's default) and its time bounds, which a transaction pooler
# keeps too (they are the transaction's, not the session's).
_ROUND = (
    "BEGIN ISOLATION LEVEL READ COMMITTED;"
    f" SET LOCAL lock_timeout = {ROUND_LOCK_TIMEOUT_MS}; SET LOCAL statement_timeout = {ROUND_STATEMENT_TIMEOUT_MS};"
    f" SELECT channel, head, moved, after FROM ermis_position_changes({ROUND_SIZE}); COMMIT"
)


class Advance(NamedTuple):
    """A channel's advance: the positions after ``after`` up to ``head`` are new (``after`` was
    its head before; the rows between are exactly the channel's rows positioned meanwhile)."""

    after: int
    head: int

    def then(self, later: Advance) -> Advance:
        """This advance followed by ``later``: from this one's start to ``later``'s head."""
        return Advance(self.after, later.head)


Advanced = dict[str, Advance]  # channel → its advance


async def position_round(conn: AsyncConnection[Any]) -> tuple[Advanced, int]:
    """One round on ``conn`` (autocommit): the channels it advanced, and how many rows it
    positioned (``ROUND_SIZE``: there may be more)."""
    rows: list[Any] = []
    async with conn.cursor(row_factory=psycopg_rows.tuple_row) as cursor:  # pooled connections make dicts
        try:
            await cursor.execute(_ROUND)
        except BaseException:
            if conn.info.transaction_status != psycopg_pq.TransactionStatus.IDLE and not conn.closed:
                await conn.rollback()  # a round that failed (a timeout) leaves its transaction open
            raise
        while True:  # the results of BEGIN, SET, SET, the round, COMMIT: the round's are the rows
            if cursor.description is not None:
                rows = await cursor.fetchall()
            if not cursor.nextset():
                break
    return {row[0]: Advance(row[3], row[1]) for row in rows}, sum(row[2] for row in rows)


def merged(earlier: Advanced, later: Advanced) -> Advanced:
    """Two successive sets of advances as one."""
    return {**earlier, **{c: earlier[c].then(a) if c in earlier else a for c, a in later.items()}}


async def position_committed(conn: AsyncConnection[Any]) -> tuple[Advanced, int]:
    """Rounds on ``conn`` until one positions less than a full round: every row committed before
    the call has its position. The channels advanced, and how many rows were positioned."""
    advanced: Advanced = {}
    total = 0
    while True:
        moved_to, count = await position_round(conn)
        advanced = merged(advanced, moved_to)
        total += count
        if count < ROUND_SIZE:
            return advanced, total


@dataclass(frozen=True)
class PositionLag:
    """Where positioning stands: the last position drawn (the sequence's, without scanning the
    log), the committed rows still without one, and the oldest of those's age in seconds
    (``None``: none waits)."""

    last_position: int
    unpositioned: int
    oldest_age_s: float | None


async def position_lag() -> PositionLag:
    """One query on one pooled connection (the operations console asks every few seconds)."""
    async with connection() as conn:
        cursor = await conn.execute(
            "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM stream_position_seq) AS last,"
            " count(*) AS rows, extract(epoch FROM now() - min(logged_at))::float8 AS age"
            " FROM stream_changes WHERE position IS NULL"
        )
        row = await cursor.fetchone()
    assert row is not None
    return PositionLag(row["last"], row["rows"], row["age"])


class _Rounds:
    """This event loop's rounds made for reads: the one in flight and when it began."""

    def __init__(self) -> None:
        self.running: asyncio.Task[Advanced] | None = None
        self.began = 0.0


_rounds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Rounds] = weakref.WeakKeyDictionary()


async def _pooled_round() -> Advanced:
    async with connection() as conn:
        await conn.set_autocommit(True)
        try:
            return (await position_committed(conn))[0]
        finally:
            await conn.set_autocommit(False)


async def positioned_now(publish: Callable[[Advanced], Awaitable[None]] | None = None) -> None:
    """Return once every row committed before the call has its position: joins the process's
    round in flight if it began after the call, else waits for it and runs (or joins) the next.
    What a round advanced is handed to ``publish`` (other processes' streams wake for it)."""
    asked = time.monotonic()
    loop = asyncio.get_running_loop()
    rounds = _rounds.get(loop) or _rounds.setdefault(loop, _Rounds())
    while True:
        running = rounds.running
        if running is not None and not running.done():
            joined = rounds.began >= asked
            try:
                await asyncio.shield(running)
            except Exception:  # a round that began before the call: its failure is not this call's
                if joined:
                    raise
            if joined:
                return
            continue
        rounds.began = time.monotonic()
        rounds.running = loop.create_task(_pooled_round(), name="ermis-positioning-round")
        advanced = await asyncio.shield(rounds.running)
        if advanced and publish is not None:
            await publish(advanced)
        return
