"""``/api/notifications/events`` (spec: the notification stream) and its REST fallback
``/api/notifications``: the frames of one connection.

One connection carries ``alert.triggered``, ``review.status.changed``, ``delivery.failed`` and
``notification.created`` — the rows of its audience's channels (``notification_reads``).

Every frame's ``id:`` is the stream's cursor after it — a position per channel, in commit
order (``positions``). On a fresh connect the 20 most recent alerts, review events and failed
deliveries are replayed oldest first with ``initial: true`` and the cursor starts at the
channels' heads (notifications are not replayed: what existed is passed). A reconnect with
``Last-Event-ID`` (or ``?lastEventId=``) gets exactly the rows after its cursor, in position
order, a page (``PAGE_SIZE`` per kind) at a time — nothing committed late can be skipped and
no burst is cut at a limit — or, when the cursor cannot be trusted, one ``stream.reset``
naming the reason and the stream goes on from now (the client refetches the snapshot).

Then each change (or tick, ``watch``) reads the rows after the cursor; a full page is followed
at once by the next. The ``notificationsRestPolling`` flag answers 204 before any stream work;
the stream self-closes at 240 s. The REST snapshot reads the same channels by the same
positions and returns its ``cursor``, so a poll and a stream agree on what was read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.lazy_imports import lazy_import
from lib.observability import pseudonym
from lib.platform import activity
from lib.platform.flags import resolve_feature_flags
from lib.streams.limits import limited_stream
from lib.streams.notification_reads import (
    REPLAYED_KINDS,
    Audience,
    AudienceRead,
    audience_for,
    audience_keys,
    channels_of,
    read_after,
    read_snapshot,
    start_audience_read,
)
from lib.streams.positions import Cursor, audience_fingerprint, parse_cursor
from lib.streams.shared_reads import SharedReads
from lib.streams.sse import RETRY_MS, cursor_body, event_body, keep_alive_frame, with_id
from lib.streams.watch import KEEP_ALIVE, ChangeWatch, stream_timing

stream_events = lazy_import("lib.contracts.stream_events")

NOTIFICATIONS_POLL_INTERVAL_MS = 5000
NOTIFICATIONS_MAX_DURATION_S = 240
SNAPSHOT_LIMIT = 50
RESET_EVENT = "stream.reset"

shared_flag_reads = SharedReads()
FLAG_SHARE_S = 5.0


class _Frames:
    """One stream's bytes: each frame's ``id:`` is the stream's cursor after it; the first frame
    of the connection also carries ``retry:``."""

    def __init__(self, first: bool = True) -> None:
        self.first = first

    def frame(self, event_id: str, body: bytes) -> bytes:
        retry = RETRY_MS if self.first else None
        self.first = False
        return with_id(event_id, body, retry)


def _replay(read: AudienceRead, frames: _Frames, heads: Cursor) -> bytes:
    """The connect replay, oldest first, each frame at the heads (the replay is context, not
    news: a reconnect during it resumes after it), then the heads as a cursor frame."""
    events = sorted(
        (event for kind in REPLAYED_KINDS if kind in read.pages for event in read.pages[kind].events),
        key=lambda event: event.position,
    )
    heads_id = heads.event_id
    return b"".join(frames.frame(heads_id, event.body) for event in events if event.body is not None)


def _batch(read: AudienceRead, cursor: Cursor, frames: _Frames) -> tuple[bytes, Cursor, bool]:
    """The frames of a page read for a stream at ``cursor`` (``_render_batch``), made once for
    every stream of the audience at that cursor."""
    key = (cursor.event_id, frames.first)
    batch = read.rendered.get(key)
    if batch is None:
        batch = read.rendered[key] = _render_batch(read, cursor, _Frames(frames.first))
    frames.first = False  # a first batch always holds a frame: its retry
    return batch


def _render_batch(read: AudienceRead, cursor: Cursor, frames: _Frames) -> tuple[bytes, Cursor, bool]:
    """The frames of a page read for a stream at ``cursor``, in position order, each with the
    cursor after it; a cursor frame if the read passed positions after the last frame (rows gone
    or dropped); the cursor at the end; whether any kind has more."""
    events = sorted(
        (event for page in read.pages.values() for event in page.events if event.body is not None),
        key=lambda e: e.position,
    )
    ids = cursor.ids_along((event.kind, event.position) for event in events)
    chunks = [frames.frame(event_id, event.body) for event_id, event in zip(ids, events, strict=True)]
    sent = cursor.moved_to({event.kind: event.position for event in events})  # the last of each kind
    at_end = cursor.moved_to({kind: max(page.head, cursor.positions[kind]) for kind, page in read.pages.items()})
    if at_end != sent or frames.first:  # a resume's first frame, even with nothing new: its retry
        chunks.append(frames.frame(at_end.event_id, cursor_body()))
    return b"".join(chunks), at_end, any(page.full for page in read.pages.values())


def _heads(read: AudienceRead, audience: Audience) -> Cursor:
    channels = channels_of(audience)
    return Cursor(read.epoch, audience_fingerprint(channels), {kind: page.head for kind, page in read.pages.items()})


def _resume_or_reset(read: AudienceRead, audience: Audience, last_event_id: str) -> Cursor | str:
    """The stream's cursor from its ``Last-Event-ID``, or why it cannot resume from it."""
    cursor = parse_cursor(last_event_id, read.epoch, channels_of(audience))
    if isinstance(cursor, Cursor) and any(cursor.positions[k] < p.pruned_through for k, p in read.pages.items()):
        return "expired"
    return cursor


def _reset(reason: str, heads: Cursor, frames: _Frames) -> bytes:
    body = event_body(RESET_EVENT, stream_events.StreamReset.model_validate({"reason": reason}).model_dump())
    assert body is not None  # a reason is plain text
    return frames.frame(heads.event_id, body)


async def notification_frames(audience: Audience, last_event_id: str | None) -> AsyncIterator[bytes]:
    """Connect (replay or resume), then the rows after the stream's cursor as they are notified
    (``watch``), a page at a time: a full page is followed at once by the next, so a burst
    of any size goes out whole, in frames of bounded size. What existed when the connection
    opened and was not replayed (notifications) is passed, never sent: the connect's cursor is
    the channels' heads."""
    timing = stream_timing(NOTIFICATIONS_POLL_INTERVAL_MS, NOTIFICATIONS_MAX_DURATION_S)
    deadline = timing.deadline()
    cursor: Cursor | None = None
    frames = _Frames()
    watch = ChangeWatch(timing, audience_keys(audience))
    report = {"report_as": "/api/notifications/events", "user": pseudonym(audience.user_id)}

    def start_read() -> asyncio.Future[AudienceRead]:
        return start_audience_read(audience, cursor, watch.read_keys(), watch.share_window_s(), watch.fresh_since())

    def wanted() -> tuple[int, ...] | None:
        return read_after(cursor, channels_of(audience))

    async with contextlib.aclosing(watch.reads(deadline, audience, start_read, **report)) as reads:
        async for shared in reads:
            if shared is KEEP_ALIVE:
                yield keep_alive_frame()
                continue
            read: AudienceRead | None = shared
            while read is not None:
                if read.after != wanted():  # read ahead for streams of the audience at another cursor
                    read = await watch.read_now(deadline, start_read, **report)
                    continue
                if cursor is None:
                    heads = _heads(read, audience)
                    resumed = _resume_or_reset(read, audience, last_event_id) if last_event_id else None
                    if isinstance(resumed, Cursor):
                        cursor, more = resumed, True
                    else:
                        cursor, more = heads, False
                        chunk = _reset(resumed, heads, frames) if resumed else _replay(read, frames, heads)
                        yield chunk + frames.frame(heads.event_id, cursor_body())
                else:
                    chunk, cursor, more = _batch(read, cursor, frames)
                    if chunk:
                        yield chunk
                read = await watch.read_now(deadline, start_read, **report) if more else None


async def notification_events(request: Request) -> Response:
    session = require_session(request)
    tenant = session.tenant_scope_id
    # Shared per tenant for a few seconds: a reconnect storm (a deploy, 10,000 tabs) costs one
    # flag read per tenant, not one per connection.
    flags = await shared_flag_reads.read(("flags", tenant), lambda: resolve_feature_flags(tenant), FLAG_SHARE_S)
    if flags["notificationsRestPolling"]:
        return Response(status_code=204)  # EventSource does not reconnect after a 204: clients poll
    # A tab taking over a shared stream (ermis-realtime.js) cannot set the header: it passes
    # the id it resumes from as ?lastEventId=.
    resume = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
    return await limited_stream(request, session, "notifications", notification_frames(audience_for(session), resume))


async def notifications_snapshot(request: Request) -> Response:
    """What the polling fallback reads: the newest rows of the same channels, with the same
    authorization, and ``cursor`` — the id a stream opened with ``Last-Event-ID: <cursor>``
    resumes from, so a poll and a stream agree on what was read."""
    audience = audience_for(require_session(request))
    read = await read_snapshot(audience, SNAPSHOT_LIMIT)
    items = {kind: [event.payload for event in page.events] for kind, page in read.pages.items()}
    return JSONResponse(
        {
            "notifications": items["notification.created"],
            "unreadCount": await activity.unread_notification_count(audience.user_id),
            "alerts": items.get("alert.triggered", []),
            "reviewEvents": items.get("review.status.changed", []),
            "deliveryFailures": items.get("delivery.failed", []),
            "cursor": _heads(read, audience).event_id,
        }
    )
