"""lib.streams.tails: what the detector tells is exactly what a read of Postgres answers, and a
process's tail never claims rows it lacks — whatever messages are lost, told again, told without
rows or out of order — so a stream reading it sends every row once."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.platform import activity
from lib.platform.activity import ALERTS, after_in_channel
from lib.streams.events import Event, shaped
from lib.streams.positioner import Advance, position_committed
from lib.streams.tails import KEPT, TOLD_LIMIT, ChannelTails, with_rows, without_rows
from tests.streams.test_notifications import alert, owner
from tests.streams.test_positioner import insert_alerts
from tests.support.functions import load_api_app
from tests.support.servers import serve_in_thread
from tests.support.sse import capture_sse

CHANNEL = "alerts|org_a"
KIND = "alert.triggered"


def event_at(position: int) -> list[object]:
    return [position, f"row-{position}", f'event: {KIND}\ndata: {{"p":{position}}}\n\n']


def message(after: int, head: int, log: list[int], *, rows: bool = True) -> dict[str, object]:
    told: dict[str, object] = {"after": after, "head": head}
    if rows:
        told["rows"] = {"pruned": 0, "events": [event_at(p) for p in log if after < p <= head]}
    return told


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[int], list[tuple[str, int, int]]]:
    """A channel's log (increasing positions, some without an event: rows gone), its advances
    told in order, and what happens to each message: delivered, lost, told without rows, or
    delivered again later (a late duplicate); and reads at random cursors in between."""
    gaps = draw(st.lists(st.integers(1, 4), min_size=1, max_size=60))
    positions = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    gone = draw(st.sets(st.sampled_from(positions), max_size=len(positions) // 3))
    log = [p for p in positions if p not in gone]
    cuts = sorted(draw(st.sets(st.sampled_from(positions), min_size=1, max_size=len(positions))))
    spans = list(zip([0, *cuts[:-1]], cuts, strict=True))
    steps: list[tuple[str, int, int]] = []
    for after, head in spans:
        fate = draw(st.sampled_from(["delivered"] * 5 + ["lost", "without rows", "repeated"]))
        steps.append((fate, after, head))
        if draw(st.booleans()):
            steps.append(("read", draw(st.integers(0, head + 2)), draw(st.integers(1, 8))))
    return log, steps


@settings(max_examples=300, deadline=None)
@given(histories())
def test_a_tail_answers_only_what_the_log_holds(history: tuple[list[int], list[tuple[str, int, int]]]) -> None:
    log, steps = history
    tails, delivered_head, late = ChannelTails(), 0, []
    for what, first, second in steps:
        if what == "read":
            page = tails.page(CHANNEL, first, second)
            if page is None:
                continue
            expected = [p for p in log if first < p <= page.head]
            assert [event.position for event in page.events] == expected
            assert len(page.events) <= second and first <= page.head <= delivered_head
            continue
        after, head = first, second
        if what == "lost":
            continue
        tails.told(CHANNEL, message(after, head, log, rows=what != "without rows"))
        delivered_head = max(delivered_head, head)
        if what == "repeated":
            late.append((after, head))
        for again in late[:-1]:  # an earlier message arriving again, late
            tails.told(CHANNEL, message(*again, log))


def test_a_tail_keeps_its_newest_events_and_answers_from_them_only() -> None:
    tails = ChannelTails()
    log = list(range(1, KEPT + 51))
    tails.told(CHANNEL, message(0, KEPT + 50, log))
    assert tails.page(CHANNEL, 10, 5) is None  # cut: not held any more
    page = tails.page(CHANNEL, 50, 10)
    assert page is not None and [e.position for e in page.events] == list(range(51, 61)) and page.full
    page = tails.page(CHANNEL, KEPT + 45, 10)
    assert page is not None and [e.position for e in page.events] == log[-5:] and not page.full


def test_garbage_on_the_bus_drops_the_tail_instead_of_answering() -> None:
    tails = ChannelTails()
    tails.told(CHANNEL, message(0, 3, [1, 2, 3]))
    tails.told(CHANNEL, {"after": 3, "head": 5, "rows": {"events": [["x", "y"]]}})
    assert tails.page(CHANNEL, 3, 10) is None
    tails.told(CHANNEL, message(5, 6, [6]))
    tails.told(CHANNEL, {"head": "nine"})
    assert tails.page(CHANNEL, 5, 10) is None


async def test_what_the_detector_tells_is_what_a_read_of_postgres_answers(db, database_url: str) -> None:
    """The rows told for an advance, shaped once on the detector's connection, are the events a
    stream's own read after the same position makes, byte for byte; an advance too big for a
    message, a channel of drafts and a channel nobody follows are told without rows."""
    await insert_alerts(db, ["a1", "a2"])
    await db.execute("DELETE FROM alert_history WHERE id = 'a1'")  # gone since logged: skipped
    await insert_alerts(db, ["b1"], "org_b")
    await insert_alerts(db, [f"c{index}" for index in range(TOLD_LIMIT + 1)], "org_c")
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        advanced, _ = await position_committed(conn)
        assert advanced[CHANNEL].after == 0
        told = await with_rows(conn, advanced, {CHANNEL, "alerts|org_c"})
        assert "rows" not in told["alerts|org_c"]  # more than a message carries
        await insert_alerts(db, ["a3"])
        later, _ = await position_committed(conn)
        assert later[CHANNEL].after == advanced[CHANNEL].head  # the head before, exactly
        told_later = await with_rows(conn, later | {"drafts|org_a": Advance(0, 9)}, {CHANNEL, "drafts|org_a"})
    expected = shaped(KIND, await after_in_channel(ALERTS, CHANNEL, 0, 10), initial=False)
    tails = ChannelTails()
    tails.told(CHANNEL, told[CHANNEL])
    page = tails.page(CHANNEL, 0, 10)
    assert page is not None
    assert [(e.position, e.row_id, e.body) for e in page.events] == [
        (e.position, e.row_id, e.body) for e in expected.events if e.position <= page.head
    ]
    assert [e.row_id for e in page.events] == ["a2"]
    tails.told(CHANNEL, told_later[CHANNEL])
    page = tails.page(CHANNEL, 0, 10)
    assert page is not None and [e.row_id for e in page.events] == ["a2", "a3"]
    # Drafts are not this stream's events; a channel no process follows is not read at all.
    assert "rows" not in told_later["drafts|org_a"] and "rows" not in told["alerts|org_b"]
    assert without_rows(later) == {CHANNEL: {"after": later[CHANNEL].after, "head": later[CHANNEL].head}}


def test_an_event_told_keeps_its_body_and_has_no_payload() -> None:
    tails = ChannelTails()
    tails.told(CHANNEL, message(0, 1, [1]))
    page = tails.page(CHANNEL, 0, 1)
    assert page is not None and page.events == [Event(KIND, "row-1", 1, None, event_at(1)[2].encode())]


async def test_pushed_alerts_reach_the_stream_without_a_read_of_its_own(
    db, set_env, mint_token, slow_polls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five alerts, each its own change: the stream sends each once, read from what the detector
    told — its process reads the channel in Postgres on connecting and following it, and not
    once for a change."""
    own_reads: list[float] = []
    first_written = asyncio.get_running_loop().create_future()
    read_of_postgres = activity.after_in_channels

    async def counted(source, afters, limit, conn=None):  # the detector passes its connection
        if conn is None and CHANNEL in afters:
            own_reads.append(time.monotonic())
        return await read_of_postgres(source, afters, limit, conn)

    monkeypatch.setattr(activity, "after_in_channels", counted)
    set_env(ERMIS_SSE_MAX_DURATION_S="6")
    with serve_in_thread(load_api_app("api/notifications/events.py")) as url:

        async def write() -> None:
            await asyncio.sleep(1.5)  # connected and following
            first_written.set_result(time.monotonic())
            for index in range(5):
                await alert(db, f"told-{index}", "org_a")
                await asyncio.sleep(0.4)  # each its own change (a window is 25 ms when quiet)

        capture, _ = await asyncio.gather(
            capture_sse(f"{url}/api/notifications/events", owner(mint_token), 4.5), write()
        )
    assert [item["id"] for item in capture.events("alert.triggered")] == [f"told-{i}" for i in range(5)]
    assert own_reads and all(at < first_written.result() for at in own_reads)
