"""lib.streams.positioner against real Postgres: writers record rows and nothing else; rounds
position only what has committed; racing writers, two positioners and a paging reader leave
every committed row read exactly once in strictly increasing positions; a transaction held open
holds nothing back; ``positioned_now`` never returns before a row committed before the call has
its position, however rounds overlap."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.platform.activity import ALERTS, after_in_channel
from lib.streams.positioner import ROUND_SIZE, Advance, position_committed, position_lag, position_round, positioned_now

CHANNEL = "alerts|org_a"
INSERT_ALERTS = (
    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
    " SELECT id, %s, 'r', id, 'info', 'in-app' FROM unnest(%s::text[]) AS id"
)


async def insert_alerts(conn: psycopg.AsyncConnection, ids: list[str], tenant: str = "org_a") -> None:
    await conn.execute(INSERT_ALERTS, (tenant, ids))


async def position_of(db: psycopg.AsyncConnection, row_id: str) -> int | None:
    row = await (await db.execute("SELECT position FROM stream_changes WHERE row_id = %s", (row_id,))).fetchone()
    return None if row is None else row[0]


async def test_a_writer_takes_no_lock_and_notifies_no_one(db, database_url: str) -> None:
    """A writer's transaction inserts its log rows and nothing else: no pg_notify (its
    cluster-wide commit lock), no advisory lock another writer of the channel would wait on."""
    async with await psycopg.AsyncConnection.connect(database_url) as writer:
        await insert_alerts(writer, ["a1"])
        backend = (await (await writer.execute("SELECT pg_backend_pid()")).fetchone())[0]
        locks = await (
            await db.execute("SELECT locktype FROM pg_locks WHERE pid = %s AND locktype = 'advisory'", (backend,))
        ).fetchall()
        queued = (await (await writer.execute("SELECT pg_notification_queue_usage()")).fetchone())[0]
        await writer.commit()
    assert locks == [] and queued == 0
    triggers = await (
        await db.execute(
            "SELECT tgname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
            " WHERE NOT t.tgisinternal AND prosrc LIKE '%%pg_notify%%'"
        )
    ).fetchall()
    assert triggers == []


async def test_a_round_positions_committed_rows_only_and_answers_the_heads(db, database_url: str) -> None:
    await insert_alerts(db, ["a1", "a2"])
    await insert_alerts(db, ["b1"], "org_b")
    async with await psycopg.AsyncConnection.connect(database_url) as open_writer:
        await insert_alerts(open_writer, ["held"])  # uncommitted: not the round's to see
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            advanced, moved = await position_round(conn)
            assert moved == 3 and advanced == {
                "alerts|org_a": Advance(0, await position_of(db, "a2")),
                "alerts|org_b": Advance(0, await position_of(db, "b1")),
            }
            assert await position_round(conn) == ({}, 0)  # nothing new: an empty round
            lag = await position_lag()  # the open transaction's row is not committed
            assert lag.unpositioned == 0 and lag.last_position == await position_of(db, "b1")
            await open_writer.commit()
            lag = await position_lag()
            assert lag.unpositioned == 1 and lag.oldest_age_s is not None and lag.oldest_age_s >= 0
            advanced, moved = await position_round(conn)
    # The head before the round, read in the round's own statement: the channel's last position.
    assert moved == 1 and advanced == {
        "alerts|org_a": Advance(await position_of(db, "a2"), await position_of(db, "held"))
    }
    read = await after_in_channel(ALERTS, CHANNEL, 0, 10)
    assert [row["id"] for _, row in read.rows] == ["a1", "a2", "held"]


async def test_a_burst_larger_than_a_round_is_positioned_whole_in_order(db, database_url: str) -> None:
    ids = [f"a{index:05}" for index in range(ROUND_SIZE + 7)]
    await insert_alerts(db, ids)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        advanced, positioned = await position_committed(conn)
    # Two rounds told as one advance: from before the first to the end of the second.
    assert advanced == {CHANNEL: Advance(0, await position_of(db, ids[-1]))} and positioned == ROUND_SIZE + 7
    read = await after_in_channel(ALERTS, CHANNEL, 0, ROUND_SIZE + 10)
    assert [row["id"] for _, row in read.rows] == ids


# A writer: how many rows it inserts, how long it waits before inserting and before committing,
# and whether it rolls back instead.
writer = st.tuples(st.integers(1, 3), st.floats(0, 0.02), st.floats(0, 0.05), st.booleans())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writers=st.lists(writer, min_size=8, max_size=12),
    page=st.integers(1, 4),
    rollbacks=st.booleans(),
    positioner_pauses=st.lists(st.floats(0, 0.01), min_size=2, max_size=2),
)
async def test_racing_writers_and_two_positioners_leave_every_committed_row_read_once_in_order(
    db,
    database_url: str,
    writers: list[tuple[int, float, float, bool]],
    page: int,
    rollbacks: bool,
    positioner_pauses: list[float],
) -> None:
    """Transactions overlap and commit in any order while two positioners run rounds at their
    own pace (two detectors after a handover gone wrong, or the detector and a read) and a
    reader pages after its cursor: each committed row is read exactly once, in strictly
    increasing positions, and no position is given twice."""
    await db.execute("TRUNCATE alert_history, stream_changes")
    committed: set[str] = set()
    all_committed = asyncio.Event()

    async def write(index: int, rows: int, before_insert: float, before_commit: float, rollback: bool) -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await asyncio.sleep(before_insert)
            ids = [f"w{index}-{row}" for row in range(rows)]
            await insert_alerts(conn, ids)
            await asyncio.sleep(before_commit)
            if rollback and rollbacks:
                await conn.rollback()
            else:
                await conn.commit()
                committed.update(ids)

    async def position_until_all_committed(pause: float) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            while True:
                finished = all_committed.is_set()
                await position_committed(conn)
                if finished:
                    return
                await asyncio.sleep(pause)

    async def read_until_all_positioned() -> list[tuple[int, str]]:
        cursor, seen = 0, []
        while True:
            finished = positioned.is_set()  # before the read: a read started after it sees all
            read = await after_in_channel(ALERTS, CHANNEL, cursor, page)
            seen += [(position, row["id"]) for position, row in read.rows if row is not None]
            cursor = read.head
            if finished and not read.full:
                return seen
            await asyncio.sleep(0.001)

    positioned = asyncio.Event()
    positioners = [asyncio.create_task(position_until_all_committed(pause)) for pause in positioner_pauses]
    reader = asyncio.create_task(read_until_all_positioned())
    await asyncio.gather(*(write(index, *plan) for index, plan in enumerate(writers)))
    all_committed.set()
    await asyncio.gather(*positioners)
    positioned.set()
    seen = await reader
    assert sorted(row_id for _, row_id in seen) == sorted(committed)
    positions = [position for position, _ in seen]
    assert positions == sorted(set(positions))
    unique = await (await db.execute("SELECT count(DISTINCT position) = count(*) FROM stream_changes")).fetchone()
    assert unique == (True,)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(callers=st.lists(st.floats(0, 0.01), min_size=2, max_size=8))
async def test_positioned_now_never_returns_before_what_committed_before_the_call(
    db, database_url: str, callers: list[float]
) -> None:
    """Callers ask at staggered moments, each right after its own commit, while the others'
    rounds are in flight: when a call returns, its row has a position."""
    await db.execute("TRUNCATE alert_history, stream_changes")

    async def commit_then_ask(index: int, delay: float) -> bool:
        await asyncio.sleep(delay)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await insert_alerts(conn, [f"c{index}"])
            await positioned_now()
            row = await (
                await conn.execute("SELECT position FROM stream_changes WHERE row_id = %s", (f"c{index}",))
            ).fetchone()
        return row is not None and row[0] is not None

    assert all(await asyncio.gather(*(commit_then_ask(index, delay) for index, delay in enumerate(callers))))


async def test_a_transaction_held_open_holds_no_row_back(db, database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as held:
        await insert_alerts(held, ["held"])  # same channel, uncommitted
        await held.execute(
            "INSERT INTO feature_flag_values (flag_key, tenant_scope_id, enabled) VALUES ('x', 'o', true)"
        )
        await insert_alerts(db, ["after"])
        await positioned_now()
        read = await after_in_channel(ALERTS, CHANNEL, 0, 10)
        assert [row["id"] for _, row in read.rows] == ["after"]
        await held.commit()
    await positioned_now()
    read = await after_in_channel(ALERTS, CHANNEL, read.head, 10)
    assert [row["id"] for _, row in read.rows] == ["held"]  # positioned above what was read: not skipped


@pytest.mark.parametrize("hold", ["DELETE FROM stream_changes", "UPDATE stream_changes SET logged_at = now()"])
async def test_a_row_another_transaction_holds_stalls_only_its_own_channel(db, database_url: str, hold: str) -> None:
    """A committed, unpositioned row of one channel held by another transaction (an erasure's
    delete, an update) left open: rounds go on at once for every other channel, that channel's
    rows wait whole (in order), and are positioned once when the holder rolls back."""
    await insert_alerts(db, ["held-1", "held-2"], "org_held")
    async with (
        await psycopg.AsyncConnection.connect(database_url) as holder,
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn,
    ):
        await holder.execute(f"{hold} WHERE channel = 'alerts|org_held' AND row_id = 'held-1'")
        await insert_alerts(db, ["free-1"], "org_free")
        advanced, moved = await asyncio.wait_for(position_round(conn), timeout=5)  # no wait on the lock
        assert (set(advanced), moved) == ({"alerts|org_free"}, 1)
        assert await position_of(db, "held-2") is None  # its channel waits whole, in order
        await insert_alerts(db, ["free-2"], "org_free")
        assert set((await asyncio.wait_for(position_round(conn), timeout=5))[0]) == {"alerts|org_free"}
        await holder.rollback()
        advanced, moved = await position_round(conn)
        assert (set(advanced), moved) == ({"alerts|org_held"}, 2)
        assert await position_of(db, "held-1") < await position_of(db, "held-2")
        assert await position_round(conn) == ({}, 0)  # once


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
async def test_a_round_sets_its_own_isolation_whatever_the_database_s_default(
    db, database_url: str, isolation: str
) -> None:
    await insert_alerts(db, ["i1"])
    options = "-c default_transaction_isolation=" + isolation.replace(" ", r"\ ")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, options=options) as conn:
        assert (await (await conn.execute("SHOW default_transaction_isolation")).fetchone())[0] == isolation
        assert await position_round(conn) == ({CHANNEL: Advance(0, await position_of(db, "i1"))}, 1)
        with pytest.raises(psycopg.errors.RaiseException, match="needs READ COMMITTED"):
            await insert_alerts(db, ["i2"])
            await conn.execute("SELECT * FROM ermis_position_changes(10)")  # called bare: refused, not wrong
        assert await position_round(conn) == (
            {CHANNEL: Advance(await position_of(db, "i1"), await position_of(db, "i2"))},
            1,
        )
