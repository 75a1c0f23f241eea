"""``/api/notifications/events`` (spec: the notification stream) and its REST fallback
``/api/notifications``.

One connection carries ``alert.triggered``, ``review.status.changed``, ``delivery.failed`` and
``notification.created``. What a connection may see (its *audience*) is decided server-side
from the session, on connect and on every tick, as one channel of the stream log per kind
(``channels_of``):

- alerts and failed deliveries: the session's tenant (normalised; none without a tenant);
- review events: the own tenant for a tenant reviewer (owner, admin), every tenant for the
  platform reviewer (``super_admin``), and for anyone else the read is never issued;
- notifications: the user's own.

Every frame's ``id:`` is the stream's cursor after it — a position per channel, in commit
order (``positions``). On a fresh connect the 20 most recent alerts, review events and failed
deliveries are replayed oldest first with ``initial: true`` and the cursor starts at the
channels' heads (notifications are not replayed: what existed is passed). A reconnect with
``Last-Event-ID`` (or ``?lastEventId=``) gets exactly the rows after its cursor, in position
order, a page (``PAGE_SIZE`` per kind) at a time — nothing committed late can be skipped and
no burst is cut at a limit — or, when the cursor cannot be trusted, one ``stream.reset``
naming the reason and the stream goes on from now (the client refetches the snapshot).

Then each change (or tick) reads the rows after the cursor. Reads are shared: a channel's page
by every stream at the same position of it (a tenant's alerts by all its users), an audience's
read by its streams at the same cursor, and each row is validated by its contract and
serialised once where it is shared (``Event.body``); each stream only prefixes its own ids. The
``notificationsRestPolling`` flag answers 204 before any stream work; the stream self-closes at
240 s. A payload that does not match its contract is dropped, never sent half-formed, and the
cursor moves past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.auth.roles import can_review_all_tenants, capability_allows
from lib.auth.sessions import Session
from lib.clock import Deadline, iso_timestamp
from lib.contracts.stream_events import AlertTriggered, DeliveryFailed, NotificationCreated, ReviewStatusChanged
from lib.observability import log_server_error
from lib.platform import activity
from lib.platform.flags import resolve_feature_flags
from lib.streams.change_feed import ANY, KEEP_ALIVE, AudienceKey, ChangeWatch
from lib.streams.positions import Cursor, audience_fingerprint, parse_cursor
from lib.streams.shared_reads import SharedReads
from lib.streams.sse import (
    CURSOR_BODY,
    KEEP_ALIVE_FRAME,
    RETRY_MS,
    EventStreamResponse,
    StreamDeadlineReached,
    event_body,
    read_before,
    stream_timing,
    with_id,
)

NOTIFICATIONS_POLL_INTERVAL_MS = 5000
NOTIFICATIONS_MAX_DURATION_S = 240
REPLAY_LIMIT = 20
SNAPSHOT_LIMIT = 50
PAGE_SIZE = 200  # rows per kind per read: a frame chunk stays around 100 KB at most
RESET_EVENT = "stream.reset"

shared_audience_reads = SharedReads()
shared_channel_reads = SharedReads()
shared_flag_reads = SharedReads()
FLAG_SHARE_S = 5.0


@dataclass(frozen=True)
class Audience:
    user_id: str
    tenant: str | None
    review_scope: str | None  # a tenant, ALL_TENANTS, or None: no review events at all


def audience_for(session: Session) -> Audience:
    if can_review_all_tenants(session.platform_role):
        review_scope: str | None = activity.ALL_TENANTS
    elif capability_allows("canReviewTenant", session.org_role, session.platform_role):
        review_scope = session.tenant_scope_id
    else:
        review_scope = None
    return Audience(session.user_id, session.tenant_scope_id, review_scope)


@dataclass(frozen=True)
class Event:
    kind: str
    row_id: str
    position: int
    payload: dict[str, Any]

    @functools.cached_property
    def body(self) -> bytes | None:
        """The frame's event and data, serialised once for every stream that sends it."""
        return event_body(self.kind, self.payload)


def _alert(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "ruleId": row["rule_id"],
        "storyId": row["story_id"],
        "title": row["title"] or "",
        "severity": row["severity"],
        "channel": row["channel"],
        "deliveredAt": iso_timestamp(row["at"]),
    }


def _review(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "storyId": row["story_id"],
        "headline": row["headline"] or "",
        "action": row["action"],
        "tenantScopeId": row["tenant_scope_id"],
        "changedAt": iso_timestamp(row["at"]),
    }


def _delivery(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "deliveryId": row["delivery_id"],
        "tenant": row["tenant_scope_id"],
        "method": row["method"],
        "responseCode": row["response_code"],
        "endpoint": row["endpoint"] or "",
        "createdAt": iso_timestamp(row["at"]),
    }


def _notification(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "title": row["title"] or "",
        "body": row["body"] or "",
        "type": row["type"],
        "read": row["read"],
        "createdAt": iso_timestamp(row["at"]),
    }


KINDS: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], type[BaseModel]]] = {
    "alert.triggered": (_alert, AlertTriggered),
    "review.status.changed": (_review, ReviewStatusChanged),
    "delivery.failed": (_delivery, DeliveryFailed),
    "notification.created": (_notification, NotificationCreated),
}
REPLAYED_KINDS = ("alert.triggered", "review.status.changed", "delivery.failed")
SOURCES = {
    "alert.triggered": activity.ALERTS,
    "review.status.changed": activity.REVIEWS,
    "delivery.failed": activity.DELIVERIES,
    "notification.created": activity.NOTIFICATIONS,
}


def to_event(kind: str, position: int, row: dict[str, Any], initial: bool) -> Event | None:
    """``row`` as an event of ``kind``, through its contract; ``None`` (reported) if it breaks it."""
    shape, contract = KINDS[kind]
    try:
        payload = contract.model_validate({**shape(row), "initial": initial}).model_dump()
    except ValidationError as error:
        log_server_error(
            "/api/notifications/events",
            f"dropped a {kind} row that breaks its contract",
            row=row["id"],
            problems=str(error.error_count()),
        )
        return None
    return Event(kind, str(row["id"]), position, payload)


@dataclass(frozen=True)
class KindPage:
    """One read of one channel, shaped once for every stream that shares it: its events (rows
    that are gone or break their contract are skipped), the position it read up to, the
    channel's retention horizon, and whether there may be more (a full page)."""

    events: list[Event]
    head: int
    pruned_through: int
    full: bool


@dataclass(frozen=True)
class AudienceRead:
    """Every kind an audience reads, read after ``after`` (the cursor's positions; ``None``: the
    connect read — the newest rows and the heads)."""

    after: tuple[int, ...] | None
    epoch: str
    pages: dict[str, KindPage]


@functools.lru_cache(maxsize=4096)
def channels_of(audience: Audience) -> dict[str, str]:
    """The channel each kind this audience may see is read from (``activity``); a kind it may not
    see — no tenant, no review capability — has none, and its read is never issued. The same
    (shared, not to be changed) dict for every stream of an audience."""
    channels = {
        "alert.triggered": activity.tenant_channel("alerts", audience.tenant),
        "review.status.changed": activity.review_channel(audience.review_scope),
        "delivery.failed": activity.tenant_channel("deliveries", audience.tenant),
        "notification.created": activity.user_channel(audience.user_id),
    }
    return {kind: channel for kind, channel in channels.items() if channel is not None}


@functools.lru_cache(maxsize=4096)
def audience_keys(audience: Audience) -> tuple[AudienceKey, ...]:
    """The change notifications this audience's reads depend on (``change_feed``): a channel is
    the notification's ``<kind>|<value>``, the platform review watches every review value."""
    keys = (tuple(channel.split("|", 1)) for channel in channels_of(audience).values())
    return tuple(dict.fromkeys((kind, ANY if value == ANY else value) for kind, value in keys))


def _channel_key(channel: str) -> AudienceKey:
    kind, _, value = channel.partition("|")
    return (kind, value)


def _start_kind_read(
    kind: str, channel: str, after: int | None, limit: int, read_key: Hashable, window_s: float, initial: bool
) -> asyncio.Future[KindPage]:
    """One channel's read, shared by every stream (of every user) at the same position of it:
    only the newest read of each is kept, so the pages of a burst are freed as they are passed."""
    source = SOURCES[kind]

    async def load() -> KindPage:
        if after is None:
            read = await activity.latest_in_channel(source, channel, limit)
        else:
            read = await activity.after_in_channel(source, channel, after, limit)
        events = (to_event(kind, position, row, initial) for position, row in read.rows if row is not None)
        return KindPage([e for e in events if e is not None], read.head, read.pruned_through, read.full)

    mode = "latest" if after is None else "after"
    return shared_channel_reads.start((channel, mode, limit, initial), load, window_s, (after, read_key))


def _after(cursor: Cursor | None, channels: dict[str, str]) -> tuple[int, ...] | None:
    """What a read for a stream at ``cursor`` reads after (``None``: it is connecting)."""
    return None if cursor is None else tuple(cursor.positions[kind] for kind in channels)


def start_audience_read(
    audience: Audience, cursor: Cursor | None, read_keys: dict[AudienceKey, Hashable], window_s: float
) -> asyncio.Future[AudienceRead]:
    """What a stream of ``audience`` at ``cursor`` reads now (``None``: it is connecting), shared
    by the streams of the audience at the same cursor and change (``read_keys``: the read key of
    each of ``audience_keys``, ``ChangeWatch.read_keys``). Each kind is shared wider (a tenant's
    alerts by all its users) and read again only when its own channel changed."""
    channels = channels_of(audience)
    after = _after(cursor, channels)

    async def load() -> AudienceRead:
        epoch = await activity.stream_log_epoch()
        reads = {}
        for index, (kind, channel) in enumerate(channels.items()):
            read_key = read_keys.get(_channel_key(channel))
            if after is None:
                limit = REPLAY_LIMIT if kind in REPLAYED_KINDS else 0
                reads[kind] = _start_kind_read(kind, channel, None, limit, read_key, window_s, initial=True)
            else:
                reads[kind] = _start_kind_read(kind, channel, after[index], PAGE_SIZE, read_key, window_s, False)
        # Started together above, awaited one by one here.
        return AudienceRead(after, epoch, {kind: await asyncio.shield(read) for kind, read in reads.items()})

    return shared_audience_reads.start(audience, load, window_s, (after, tuple(read_keys.values())))


class _Frames:
    """One stream's bytes: each frame's ``id:`` is the stream's cursor after it; the first frame
    of the connection also carries ``retry:``."""

    def __init__(self) -> None:
        self.first = True

    def frame(self, cursor: Cursor, body: bytes) -> bytes:
        retry = RETRY_MS if self.first else None
        self.first = False
        return with_id(cursor.event_id, body, retry)


def _replay(read: AudienceRead, frames: _Frames, heads: Cursor) -> bytes:
    """The connect replay, oldest first, each frame at the heads (the replay is context, not
    news: a reconnect during it resumes after it), then the heads as a cursor frame."""
    events = sorted(
        (event for kind in REPLAYED_KINDS if kind in read.pages for event in read.pages[kind].events),
        key=lambda event: event.position,
    )
    return b"".join(frames.frame(heads, event.body) for event in events if event.body is not None)


def _batch(read: AudienceRead, cursor: Cursor, frames: _Frames) -> tuple[bytes, Cursor, bool]:
    """The frames of a page read for a stream at ``cursor``, in position order, each with the
    cursor after it; a cursor frame if the read passed positions after the last frame (rows gone
    or dropped); the cursor at the end; whether any kind has more."""
    chunks = []
    events = sorted((event for page in read.pages.values() for event in page.events), key=lambda e: e.position)
    sent = cursor
    for event in events:
        if event.body is not None:
            sent = sent.moved(event.kind, event.position)
            chunks.append(frames.frame(sent, event.body))
    at_end = cursor
    for kind, page in read.pages.items():
        at_end = at_end.moved(kind, max(page.head, cursor.positions[kind]))
    if at_end != sent or frames.first:  # a resume's first frame, even with nothing new: its retry
        chunks.append(frames.frame(at_end, CURSOR_BODY))
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
    body = event_body(RESET_EVENT, {"reason": reason})
    assert body is not None  # a reason is plain text
    return frames.frame(heads, body)


async def notification_frames(audience: Audience, last_event_id: str | None) -> AsyncIterator[bytes]:
    """Connect (replay or resume), then the rows after the stream's cursor as they are notified
    (``change_feed``), a page at a time: a full page is followed at once by the next, so a burst
    of any size goes out whole, in frames of bounded size. What existed when the connection
    opened and was not replayed (notifications) is passed, never sent: the connect's cursor is
    the channels' heads."""
    timing = stream_timing(NOTIFICATIONS_POLL_INTERVAL_MS, NOTIFICATIONS_MAX_DURATION_S)
    deadline = timing.deadline()
    cursor: Cursor | None = None
    frames = _Frames()
    watch = ChangeWatch(timing, audience_keys(audience))

    def start_read() -> asyncio.Future[AudienceRead]:
        return start_audience_read(audience, cursor, watch.read_keys(), watch.share_window_s())

    def wanted() -> tuple[int, ...] | None:
        return _after(cursor, channels_of(audience))

    async with contextlib.aclosing(
        watch.reads(deadline, audience, start_read, "/api/notifications/events", user=audience.user_id)
    ) as reads:
        async for shared in reads:
            if shared is KEEP_ALIVE:
                yield KEEP_ALIVE_FRAME
                continue
            read: AudienceRead | None = shared
            while read is not None:
                if read.after != wanted():  # read ahead for streams of the audience at another cursor
                    read = await _read_now(deadline, start_read, audience)
                    continue
                if cursor is None:
                    heads = _heads(read, audience)
                    resumed = _resume_or_reset(read, audience, last_event_id) if last_event_id else None
                    if isinstance(resumed, Cursor):
                        cursor, more = resumed, True
                    else:
                        cursor, more = heads, False
                        chunk = _reset(resumed, heads, frames) if resumed else _replay(read, frames, heads)
                        yield chunk + frames.frame(heads, CURSOR_BODY)
                else:
                    chunk, cursor, more = _batch(read, cursor, frames)
                    if chunk:
                        yield chunk
                read = await _read_now(deadline, start_read, audience) if more else None


async def _read_now(
    deadline: Deadline, start_read: Callable[[], asyncio.Future[AudienceRead]], audience: Audience
) -> AudienceRead | None:
    """A read the stream makes without waiting (the next page, its own cursor): ``None`` when it
    fails (reported; the next change or tick reads again) or the self-close comes first."""
    try:
        return await read_before(deadline, start_read())
    except StreamDeadlineReached:
        return None
    except Exception as error:  # noqa: BLE001 - a failed read is skipped, not fatal
        log_server_error("/api/notifications/events", error, user=audience.user_id)
        return None


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
    return EventStreamResponse("notifications", notification_frames(audience_for(session), resume))


async def notifications_snapshot(request: Request) -> Response:
    """What the polling fallback reads: the newest rows of the same channels, with the same
    authorization, and ``cursor`` — the id a stream opened with ``Last-Event-ID: <cursor>``
    resumes from, so a poll and a stream agree on what was read."""
    audience = audience_for(require_session(request))
    channels = channels_of(audience)
    epoch = await activity.stream_log_epoch()
    reads = {  # window 0: a fresh read
        kind: _start_kind_read(kind, channel, None, SNAPSHOT_LIMIT, None, 0, initial=False)
        for kind, channel in channels.items()
    }
    pages = {kind: await asyncio.shield(read) for kind, read in reads.items()}
    items = {kind: [event.payload for event in page.events] for kind, page in pages.items()}
    return JSONResponse(
        {
            "notifications": items["notification.created"],
            "unreadCount": await activity.unread_notification_count(audience.user_id),
            "alerts": items.get("alert.triggered", []),
            "reviewEvents": items.get("review.status.changed", []),
            "deliveryFailures": items.get("delivery.failed", []),
            "cursor": _heads(AudienceRead(None, epoch, pages), audience).event_id,
        }
    )
