"""The stream log (migration 0012) read through ``lib.platform.activity``: positions in commit
order under writers that overlap and commit out of order, rows gone since they were logged,
one statement's burst, and the head that a connect starts from."""

from __future__ import annotations

import asyncio

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.platform.activity import ALERTS, after_in_channel, latest_in_channel

CHANNEL = "alerts|org_a"
INSERT_ALERTS = (
    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
    " SELECT id, 'org_a', 'r', id, 'info', 'in-app' FROM unnest(%s::text[]) AS id"
)

# A writer: how many rows it inserts, how long it waits before inserting and before committing,
# and whether it rolls back instead.
writer = st.tuples(st.integers(1, 3), st.floats(0, 0.02), st.floats(0, 0.05), st.booleans())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writers=st.lists(writer, min_size=8, max_size=12), page=st.integers(1, 4), rollbacks=st.booleans())
async def test_a_reader_after_positions_sees_every_committed_row_once(
    db, database_url: str, writers: list[tuple[int, float, float, bool]], page: int, rollbacks: bool
) -> None:
    """Transactions overlap and commit in any order while a reader pages after its cursor: each
    committed row is read exactly once, in increasing positions — a position drawn at insert
    (a bigserial) would let a late commit land below the cursor and be skipped."""
    await db.execute("TRUNCATE alert_history, stream_changes")
    committed: set[str] = set()
    all_committed = asyncio.Event()

    async def write(index: int, rows: int, before_insert: float, before_commit: float, rollback: bool) -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await asyncio.sleep(before_insert)
            ids = [f"w{index}-{row}" for row in range(rows)]
            await conn.execute(INSERT_ALERTS, (ids,))
            await asyncio.sleep(before_commit)
            if rollback and rollbacks:
                await conn.rollback()
            else:
                await conn.commit()
                committed.update(ids)

    async def read_until_all_committed() -> list[tuple[int, str]]:
        cursor, seen = 0, []
        while True:
            finished = all_committed.is_set()  # before the read: a read started after it sees all
            read = await after_in_channel(ALERTS, CHANNEL, cursor, page)
            seen += [(position, row["id"]) for position, row in read.rows if row is not None]
            cursor = read.head
            if finished and not read.full:
                return seen
            await asyncio.sleep(0.001)

    reader = asyncio.create_task(read_until_all_committed())
    await asyncio.gather(*(write(index, *plan) for index, plan in enumerate(writers)))
    all_committed.set()
    seen = await reader
    assert sorted(row_id for _, row_id in seen) == sorted(committed)
    positions = [position for position, _ in seen]
    assert positions == sorted(set(positions))


async def test_a_row_gone_since_it_was_logged_keeps_its_position_and_is_skipped(db) -> None:
    await db.execute(INSERT_ALERTS, (["a1", "a2", "a3"],))
    await db.execute("DELETE FROM alert_history WHERE id = 'a2'")
    read = await after_in_channel(ALERTS, CHANNEL, 0, 10)
    assert [row["id"] if row else None for _, row in read.rows] == ["a1", None, "a3"]
    assert read.head == read.rows[-1][0] and not read.full


async def test_one_statement_of_ten_thousand_rows_is_read_in_pages_in_order(db) -> None:
    ids = [f"a{index:05}" for index in range(10_000)]
    await db.execute(INSERT_ALERTS, (ids,))
    cursor, seen = 0, []
    while True:
        read = await after_in_channel(ALERTS, CHANNEL, cursor, 500)
        assert len(read.rows) <= 500
        seen += [row["id"] for _, row in read.rows if row is not None]
        cursor = read.head
        if not read.full:
            break
    assert seen == ids  # positions follow the statement's order


async def test_the_head_is_the_newest_position_or_the_retention_horizon(db) -> None:
    empty = await latest_in_channel(ALERTS, CHANNEL, 5)
    assert (empty.rows, empty.head, empty.pruned_through) == ([], 0, 0)
    await db.execute(INSERT_ALERTS, (["a1", "a2"],))
    latest = await latest_in_channel(ALERTS, CHANNEL, 1)
    assert [row["id"] for _, row in latest.rows] == ["a2"] and latest.head == latest.rows[0][0]
    await db.execute("DELETE FROM stream_changes")
    await db.execute("INSERT INTO stream_channels VALUES (%s, %s)", (CHANNEL, latest.head + 5))
    pruned = await latest_in_channel(ALERTS, CHANNEL, 1)
    assert (pruned.rows, pruned.head, pruned.pruned_through) == ([], latest.head + 5, latest.head + 5)
