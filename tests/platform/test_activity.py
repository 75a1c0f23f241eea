"""The stream log (migrations 0012, 0016) read through ``lib.platform.activity``, positioned by
``lib.streams.positioner`` (tested under racing writers in tests/streams/test_positioner): rows
gone since they were logged, one statement's burst in pages, and the head that a connect starts
from."""

from __future__ import annotations

from lib.platform.activity import ALERTS, after_in_channel, latest_in_channel
from lib.streams.positioner import positioned_now

CHANNEL = "alerts|org_a"
INSERT_ALERTS = (
    "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
    " SELECT id, 'org_a', 'r', id, 'info', 'in-app' FROM unnest(%s::text[]) AS id"
)


async def test_a_row_gone_since_it_was_logged_keeps_its_position_and_is_skipped(db) -> None:
    await db.execute(INSERT_ALERTS, (["a1", "a2", "a3"],))
    await db.execute("DELETE FROM alert_history WHERE id = 'a2'")
    await positioned_now()
    read = await after_in_channel(ALERTS, CHANNEL, 0, 10)
    assert [row["id"] if row else None for _, row in read.rows] == ["a1", None, "a3"]
    assert read.head == read.rows[-1][0] and not read.full


async def test_one_statement_of_ten_thousand_rows_is_read_in_pages_in_order(db) -> None:
    ids = [f"a{index:05}" for index in range(10_000)]
    await db.execute(INSERT_ALERTS, (ids,))
    await positioned_now()
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
    assert (await latest_in_channel(ALERTS, CHANNEL, 1)).rows == []  # not positioned yet: not for streams
    await positioned_now()
    latest = await latest_in_channel(ALERTS, CHANNEL, 1)
    assert [row["id"] for _, row in latest.rows] == ["a2"] and latest.head == latest.rows[0][0]
    await db.execute("DELETE FROM stream_changes")
    await db.execute("INSERT INTO stream_channels VALUES (%s, %s)", (CHANNEL, latest.head + 5))
    pruned = await latest_in_channel(ALERTS, CHANNEL, 1)
    assert (pruned.rows, pruned.head, pruned.pruned_through) == ([], latest.head + 5, latest.head + 5)
