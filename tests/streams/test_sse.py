"""lib.streams.sse and lib.contracts.stream_events: frames data cannot break, and contracts
that answer None instead of raising."""

from __future__ import annotations

import json

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lib.contracts.stream_events import AlertTriggered, FeedChanged, parse_json_with_schema
from lib.streams.sse import sse_frame


@pytest.mark.parametrize("name", ["", "Alert", "alert triggered", "alert\ntriggered", "x" * 65, "1up"])
def test_invalid_event_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        sse_frame(name, {}, "1")


@given(st.text(max_size=200), st.text(max_size=40))
def test_any_text_makes_one_well_formed_frame_or_none(text: str, event_id: str) -> None:
    frame = sse_frame("feed.changed", {"value": text}, event_id)
    if frame is None:
        return  # text that UTF-8 cannot carry (a lone surrogate) is dropped
    encoded = frame.encode().decode()
    lines = encoded.split("\r\n")
    assert lines[-2:] == ["", ""]  # exactly one frame, terminated once
    fields = dict(line.split(": ", 1) for line in lines[:-2])
    assert set(fields) == {"id", "event", "data"}
    assert json.loads(fields["data"]) == {"value": text}
    assert "\n" not in fields["id"] and "\r" not in fields["id"] and "\x00" not in fields["id"]


def test_parse_json_with_schema_never_raises() -> None:
    assert parse_json_with_schema('{"latestUpdatedAt": null, "draftCount": 2}', FeedChanged) == FeedChanged(
        latestUpdatedAt=None, draftCount=2
    )
    for bad in (None, "", "{", "[]", '{"draftCount": "two"}', '{"latestUpdatedAt": null, "draftCount": 1, "x": 1}'):
        assert parse_json_with_schema(bad, FeedChanged) is None
    alert = {
        "id": "a", "ruleId": None, "storyId": "s", "title": "t", "severity": "severe",
        "channel": "in-app", "deliveredAt": "2026-01-01T00:00:00.000Z", "initial": False,
    }  # fmt: skip
    assert parse_json_with_schema(json.dumps(alert), AlertTriggered) is None
    assert parse_json_with_schema(json.dumps({**alert, "severity": "critical"}), AlertTriggered) is not None


async def test_nul_and_invalid_utf8_cannot_reach_a_frame(db) -> None:
    # Postgres refuses both at write time, so no stored row can carry them to a stream...
    for title in ("nul \x00 inside", "bad \udcff utf-8"):
        with pytest.raises((psycopg.DataError, UnicodeEncodeError)):
            await db.execute(
                "INSERT INTO notifications (id, user_id, title, type) VALUES ('n', 'u', %s, 'system')", (title,)
            )
    # ...and if one ever did, the frame escapes the NUL and drops what UTF-8 cannot carry.
    frame = sse_frame("notification.created", {"title": "a\x00b"}, "id\x00with-nul")
    encoded = frame.encode().decode()
    assert "\\u0000" in encoded and "\x00" not in encoded
    assert sse_frame("notification.created", {"title": "bad \udcff"}, "x") is None
