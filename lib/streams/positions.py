"""Stream cursors: where a notification stream is, as the frame ids it sends (issue 20).

Every row a notification stream sends has a position in its channel's commit order (the stream
log, ``lib.platform.activity``, migration 0012): within a channel, a row that becomes visible
later always has a higher position, so "the rows after position p" can never skip one that
commits late — the guarantee a time (``DEFAULT now()`` is the transaction's *start*) or the
difference between two newest-N reads did not have. Why positions are assigned at commit under
a per-channel lock, not read below a snapshot watermark: a watermark is cluster-wide, and one
long transaction anywhere (the refresh tick, a cleanup batch) would hold every stream back.

A stream reads one channel per kind it may see, so its cursor is one position per kind. The
``id:`` of every frame is the cursor *after* that frame, written as::

    <epoch>.<audience>.<alerts>.<reviews>.<deliveries>.<notifications>

``epoch`` names the database (a cursor from another one means nothing here), ``audience`` is a
fingerprint of the channels the positions are in (a session whose tenant or role changed reads
other channels, where the positions mean nothing either), then the positions in ``KIND_ORDER``
(0 for a kind the audience does not read). Clients treat it as opaque and send it back as
``Last-Event-ID``.

``parse_cursor`` answers a resume with the cursor, or the reason it cannot be trusted — the
stream then sends one ``stream.reset`` naming it and continues from now, never skips silently:

- ``malformed``: not a cursor at all;
- ``upgraded``: an id of the format before positions (``<time>|<kind>|<row id>``): a browser
  that held it across the deploy; it refetches the snapshot, so it can miss nothing;
- ``foreign``: another database's epoch;
- ``audience_changed``: positions in other channels than this session reads;
- ``expired`` (found by the stream, not here): older than the retention horizon of one of its
  channels — rows after it may already be deleted.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

KIND_ORDER: Final = ("alert.triggered", "review.status.changed", "delivery.failed", "notification.created")
_SLOT: Final = {kind: 2 + index for index, kind in enumerate(KIND_ORDER)}  # a kind's place in an id
_CURSOR = re.compile(rf"^([0-9a-f]{{12}})\.([0-9a-f]{{8}})((?:\.[0-9]{{1,18}}){{{len(KIND_ORDER)}}})$")


def audience_fingerprint(channels: dict[str, str]) -> str:
    """Eight hex digits naming the channels (kind → channel) a cursor's positions are in."""
    named = "\x1f".join(channels.get(kind, "") for kind in KIND_ORDER)
    return f"{zlib.crc32(named.encode('utf-8', 'surrogatepass')):08x}"


@dataclass(frozen=True)
class Cursor:
    """The last position a stream has passed in each of its channels (kind → position)."""

    epoch: str
    audience: str
    positions: dict[str, int]

    def moved_to(self, positions: dict[str, int]) -> Cursor:
        """This cursor with the kinds of ``positions`` moved there."""
        return Cursor(self.epoch, self.audience, {**self.positions, **positions})

    @property
    def event_id(self) -> str:
        return ".".join((self.epoch, self.audience, *(str(self.positions.get(kind, 0)) for kind in KIND_ORDER)))

    def ids_along(self, moves: Iterable[tuple[str, int]]) -> Iterator[str]:
        """The event id of this cursor moved by each ``(kind, position)`` in turn: the ids of a
        page's frames, made without a cursor per frame (a burst makes a million of them)."""
        parts = self.event_id.split(".")
        for kind, position in moves:
            parts[_SLOT[kind]] = str(position)
            yield ".".join(parts)


def parse_cursor(raw: str, epoch: str, channels: dict[str, str]) -> Cursor | str:
    """``raw`` (a ``Last-Event-ID``) as this audience's cursor, or the reason it is not one."""
    match = _CURSOR.match(raw)
    if match is None:
        return "upgraded" if raw.count("|") == 2 else "malformed"
    if match.group(1) != epoch:
        return "foreign"
    if match.group(2) != audience_fingerprint(channels):
        return "audience_changed"
    numbers = dict(zip(KIND_ORDER, (int(number) for number in match.group(3)[1:].split(".")), strict=True))
    return Cursor(epoch, match.group(2), {kind: numbers[kind] for kind in channels})
