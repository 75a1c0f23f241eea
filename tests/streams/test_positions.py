"""lib.streams.positions: cursors as frame ids — every id parses back to its cursor, and the ids a
page's frames carry are those of the cursor moved frame by frame."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lib.streams.positions import KIND_ORDER, Cursor, audience_fingerprint, parse_cursor

CHANNELS = {kind: f"{kind}|org_a" for kind in KIND_ORDER}
positions = st.integers(0, 10**15)
cursors = st.builds(
    lambda numbers: Cursor("0123456789ab", audience_fingerprint(CHANNELS), dict(zip(KIND_ORDER, numbers, strict=True))),
    st.lists(positions, min_size=len(KIND_ORDER), max_size=len(KIND_ORDER)),
)


@given(cursors, st.lists(st.tuples(st.sampled_from(KIND_ORDER), positions), max_size=30))
def test_the_ids_of_a_page_are_the_cursor_moved_frame_by_frame(cursor: Cursor, moves: list) -> None:
    moved, expected = cursor, []
    for kind, position in moves:
        moved = moved.moved_to({kind: position})
        expected.append(moved.event_id)
    assert list(cursor.ids_along(moves)) == expected
    for event_id in expected:
        assert parse_cursor(event_id, "0123456789ab", CHANNELS).event_id == event_id


@given(cursors)
def test_a_cursor_is_refused_by_another_database_or_audience(cursor: Cursor) -> None:
    assert parse_cursor(cursor.event_id, "ba9876543210", CHANNELS) == "foreign"
    assert parse_cursor(cursor.event_id, cursor.epoch, {**CHANNELS, "alert.triggered": "alerts|org_b"}) == (
        "audience_changed"
    )
    assert parse_cursor("2026-12-05T10:00:00.000Z|alert.triggered|a1", cursor.epoch, CHANNELS) == "upgraded"
