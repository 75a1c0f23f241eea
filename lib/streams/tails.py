"""Channel tails: the change detector reads a channel's new rows once and tells them on the bus;
each stream process keeps the recent ones and its streams read them there, not in Postgres.

The model:

- **What is told.** When the detector publishes a channel's advance (``detector``), it reads
  the channel's rows after the advance's ``after`` — the channel's head before it, exactly
  (``positioner.Advance``) — on its own connection, shapes them into events once
  (``events``), and tells ``{"after", "head", "rows": {"pruned", "events": [[position,
  row id, frame body], ...]}}``: *every* row of the channel in ``(after, head]`` (rows gone
  since they were logged, or breaking their contract, are absent: their positions still count).
  A channel no process follows (Redis counts the subscribers: one round trip), a channel of
  another kind (drafts), an advance of more than ``TOLD_LIMIT`` rows (a bulk import: the
  streams page through Postgres) or one positioned outside the detector (a read's round) is
  told without rows — the detector reads only what some process will use.
- **What a process keeps** (``ChannelTails``, one per listener): per followed channel, a
  *tail* — ``(after, head]`` and its events — extended when a message's ``after`` is the
  tail's ``head`` (nothing between was missed), started afresh when it is not (a message was
  lost, or positioned elsewhere), dropped when an advance is told without rows, and cut to
  its last ``KEPT`` events. Every message says where it starts, so a lost one shows as a gap,
  never as a tail that claims rows it lacks.
- **Who reads it.** A stream woken by a change (``listener``) reads a channel at its cursor from
  the tail when the tail covers the cursor (``after <= cursor <= head``); anything else — the
  connect, a resume, the next page of a burst, the safety net's tick, polling while push is
  down — reads Postgres. The safety net is what catches a message lost without a gap, so it
  never reads a tail.

So a process that holds the streams of a busy tenant costs Postgres nothing per change: 80
processes following one tenant cost one read of its rows (the detector's), not 80.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lib.platform import activity
from lib.streams.events import SOURCES, Event, KindPage, kind_of_channel, shaped
from lib.streams.positioner import Advanced

if TYPE_CHECKING:
    from psycopg import AsyncConnection

TOLD_LIMIT = 200  # rows a message carries at most: a busier channel is told without them
KEPT = TOLD_LIMIT  # events a process keeps per channel: always all of the last message (a stream
# that read up to the message before is covered), and at most a message's worth of memory

Message = dict[str, Any]


def without_rows(advanced: Advanced) -> dict[str, Message]:
    """The message for each channel of ``advanced``: its advance alone (a read's round)."""
    return {channel: {"after": advance.after, "head": advance.head} for channel, advance in advanced.items()}


async def with_rows(conn: AsyncConnection[Any], advanced: Advanced, followed: set[str]) -> dict[str, Message]:
    """The message for each channel of ``advanced``: its advance, with its rows read on ``conn``
    (one statement per kind) and shaped once where some process follows the channel
    (``followed``) and they fit in a message (the detector's)."""
    messages = without_rows(advanced)
    by_kind: dict[str, dict[str, int]] = {}
    for channel, advance in advanced.items():
        kind = kind_of_channel(channel)
        if kind is not None and channel in followed:
            by_kind.setdefault(kind, {})[channel] = advance.after
    for kind, afters in by_kind.items():
        reads = await activity.after_in_channels(SOURCES[kind], afters, TOLD_LIMIT + 1, conn)
        for channel, read in reads.items():
            if read.full:  # more than a message carries
                continue
            page = shaped(kind, read, initial=False)
            message = messages[channel]
            message["head"] = max(message["head"], read.head)  # rows positioned since are in it too
            message["rows"] = {
                "pruned": page.pruned_through,
                "events": [[e.position, e.row_id, e.body.decode()] for e in page.events if e.body is not None],
            }
    return messages


@dataclass
class ChannelTail:
    """Every event of a channel in ``(after, head]``, in position order."""

    after: int
    head: int
    pruned_through: int
    events: list[Event]
    positions: list[int]


class ChannelTails:
    """A process's tails, by channel (``told`` by the listener, ``page``d by the reads)."""

    def __init__(self) -> None:
        self._tails: dict[str, ChannelTail] = {}

    def told(self, channel: str, message: Message) -> None:
        """Take in a message of the bus about ``channel``."""
        try:
            after, head = int(message["after"]), int(message["head"])
        except (KeyError, TypeError, ValueError):
            self._tails.pop(channel, None)
            return
        tail = self._tails.get(channel)
        if tail is not None and head <= tail.head:
            return  # nothing the tail lacks
        rows, kind = message.get("rows"), kind_of_channel(channel)
        events = _events(kind, rows) if kind is not None and isinstance(rows, dict) else None
        if events is None:
            self._tails.pop(channel, None)
            return
        if tail is not None and tail.after <= after <= tail.head:
            kept = bisect.bisect_right(tail.positions, after)  # an overlap is told again: keep one
            tail.events[kept:] = events
            tail.positions[kept:] = [event.position for event in events]
            tail.head, tail.pruned_through = head, int(rows.get("pruned", 0))
        else:  # the first, or after a gap: start afresh
            tail = self._tails[channel] = ChannelTail(
                after, head, int(rows.get("pruned", 0)), events, [event.position for event in events]
            )
        if len(tail.events) > KEPT:
            cut = len(tail.events) - KEPT
            tail.after = tail.positions[cut - 1]
            del tail.events[:cut], tail.positions[:cut]

    def page(self, channel: str, after: int, limit: int) -> KindPage | None:
        """The channel's events after ``after``, a page of ``limit``, if the tail holds them all
        (``None``: read Postgres)."""
        tail = self._tails.get(channel)
        if tail is None or not tail.after <= after <= tail.head:
            return None
        start = bisect.bisect_right(tail.positions, after)
        events = tail.events[start : start + limit]
        full = len(tail.events) - start > limit
        head = events[-1].position if full else tail.head
        return KindPage(events, head, tail.pruned_through, full)

    def forget(self, channel: str) -> None:
        self._tails.pop(channel, None)

    def clear(self) -> None:
        self._tails.clear()


def _events(kind: str, rows: dict[str, Any]) -> list[Event] | None:
    try:
        return [
            Event(kind, str(row_id), int(position), None, body.encode()) for position, row_id, body in rows["events"]
        ]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
