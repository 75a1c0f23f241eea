"""``/api/notifications/events`` (spec: the notification stream) and its REST fallback
``/api/notifications``.

One connection carries ``alert.triggered``, ``review.status.changed``, ``delivery.failed`` and
``notification.created``. What a connection may see (its *audience*) is decided server-side
from the session, on connect and on every tick:

- alerts and failed deliveries: the session's tenant (normalised; none without a tenant);
- review events: the own tenant for a tenant reviewer (owner, admin), every tenant for the
  platform reviewer (``super_admin``), and for anyone else the read is never issued;
- notifications: the user's own.

On a fresh connect the 20 most recent alerts, review events and failed deliveries are replayed
oldest first with ``initial: true``; notifications only seed the seen set. A reconnect that
sends ``Last-Event-ID`` (every frame id is ``<time>|<kind>|<row id>``) gets no replay: rows up
to that time count as seen, and only newer ones are sent — the spec's reconnect flood, closed.
Each tick then sends whatever this connection has not seen, in time order. Every read is
shared per audience key (tenant, review scope, user) and per change or poll tick, and shaped
once where it is shared (``KindRead``: rows validated by their contract and framed), so a change
that wakes a thousand streams of a tenant costs one query and one serialisation per kind, and
each stream only picks the frames it has not seen — by reference to the shared read's ids, so
an idle stream holds no copy of them. The
``notificationsRestPolling`` flag answers 204 before any stream work; the stream self-closes
at 240 s. A payload that does not match its contract is dropped, never sent half-formed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.auth.roles import can_review_all_tenants, capability_allows
from lib.auth.sessions import Session
from lib.clock import iso_timestamp
from lib.contracts.stream_events import AlertTriggered, DeliveryFailed, NotificationCreated, ReviewStatusChanged
from lib.observability import log_server_error
from lib.platform import activity
from lib.platform.activity import normalize_tenant_id
from lib.platform.flags import resolve_feature_flags
from lib.streams.change_feed import ANY, KEEP_ALIVE, AudienceKey, ChangeWatch
from lib.streams.shared_reads import SharedReads
from lib.streams.sse import (
    KEEP_ALIVE_FRAME,
    RETRY_MS,
    EventStreamResponse,
    cursor_frame,
    sse_frame,
    stream_timing,
)

NOTIFICATIONS_POLL_INTERVAL_MS = 5000
NOTIFICATIONS_MAX_DURATION_S = 240
REPLAY_LIMIT = 20
READ_LIMIT = 50
NONE_SEEN: frozenset[str] = frozenset()

shared_audience_reads = SharedReads()
shared_activity_reads = SharedReads()
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
    at: datetime
    payload: dict[str, Any]

    @property
    def event_id(self) -> str:
        return f"{_id_time(self.at)}|{self.kind}|{self.row_id}"

    @property
    def order(self) -> tuple[datetime, str, str]:
        return (self.at, self.kind, self.row_id)

    def frame(self, retry: int | None = None) -> bytes | None:
        return sse_frame(self.kind, self.payload, self.event_id, retry=retry)

    @functools.cached_property
    def shared_frame(self) -> bytes | None:
        """The frame every stream sends for this event, serialised once."""
        return self.frame()


def _id_time(at: datetime) -> str:
    # Microseconds, as stored: a resume must not re-send the row it stopped at.
    return at.astimezone(UTC).isoformat(timespec="microseconds")


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


def to_event(kind: str, row: dict[str, Any], initial: bool) -> Event | None:
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
    return Event(kind, str(row["id"]), row["at"], payload)


class KindRead:
    """One shared read of one kind for one audience, shaped once for every stream sharing it.

    It builds on the read it supersedes (``previous``): rows that are unchanged keep their
    events (one contract check per new row, not per row read), and what is new since then is
    worked out once (``new_events``) — so a stream that saw the previous read finds its frames
    without looking at the fifty rows it has already seen. Only the previous ids are kept, never
    the previous read: reads do not chain."""

    def __init__(self, kind: str, rows: list[dict[str, Any]], previous: KindRead | None = None) -> None:
        self.kind, self.rows = kind, rows
        known = previous._shaped if previous is not None else {}
        self._shaped: dict[str, tuple[dict[str, Any], Event | None]] = {}
        for row in rows:
            row_id = str(row["id"])
            shaped = known.get(row_id)
            if shaped is None or shaped[0] != row:  # new, or changed since
                shaped = (row, to_event(kind, row, False))
            self._shaped[row_id] = shaped
        self.events = [event for _, event in self._shaped.values() if event is not None]
        self.ids = frozenset(self._shaped)
        self.previous_ids = previous.ids if previous is not None else None
        self.new_events = self.events if previous is None else [e for e in self.events if e.row_id not in previous.ids]
        self.newest = max((row["at"] for row in rows), default=None)
        self._replay: list[Event] | None = None

    def unseen(self, seen: frozenset[str]) -> list[Event]:
        """The events of rows not in ``seen`` — the ids of a read this stream had."""
        if seen is self.ids:
            return []
        if seen is self.previous_ids:
            return self.new_events
        return [event for event in self.events if event.row_id not in seen]

    def replay(self) -> list[Event]:
        """The connect replay (``initial: true``), built by the first stream that connects."""
        if self._replay is None:
            replay = (to_event(self.kind, row, True) for row in self.rows[:REPLAY_LIMIT])
            self._replay = [event for event in replay if event is not None]
        return self._replay


@functools.lru_cache(maxsize=4096)
def kind_keys(audience: Audience) -> dict[str, AudienceKey]:
    """The change notification each kind's read depends on (``change_feed``); the same (shared,
    not to be changed) dict for every stream of an audience."""
    tenant = normalize_tenant_id(audience.tenant)
    keys = {"alert.triggered": ("alerts", tenant), "delivery.failed": ("deliveries", tenant)}
    keys["notification.created"] = ("user", audience.user_id)
    if audience.review_scope is not None:
        review = ANY if audience.review_scope == activity.ALL_TENANTS else normalize_tenant_id(audience.review_scope)
        keys["review.status.changed"] = ("review", review)
    return keys


@functools.lru_cache(maxsize=4096)
def audience_keys(audience: Audience) -> tuple[AudienceKey, ...]:
    """The change notifications this audience's reads depend on."""
    return tuple(dict.fromkeys(kind_keys(audience).values()))


def start_activity_read(
    audience: Audience, read_keys: dict[AudienceKey, Hashable], window_s: float
) -> asyncio.Future[dict[str, KindRead]]:
    """Every kind this audience may see, read once per audience and change (or tick): the
    streams of one user share it whole, and each kind is shared wider (a tenant's alerts by all
    its users) and read again only when its own audience changed (``read_keys``: the read key of
    each of ``audience_keys``, ``ChangeWatch.read_keys``)."""
    by_kind = {kind: read_keys[key] for kind, key in kind_keys(audience).items()}
    return shared_audience_reads.start(
        audience, lambda: _read_each_kind(audience, by_kind, window_s), window_s, tuple(read_keys.values())
    )


async def _read_each_kind(audience: Audience, read_keys: dict[str, Hashable], window_s: float) -> dict[str, KindRead]:
    def shared(
        kind: str, key: tuple[str, str], load: Callable[[], Awaitable[list[dict[str, Any]]]]
    ) -> asyncio.Future[KindRead]:
        previous = shared_activity_reads.latest(key)  # what a new read builds on

        async def load_and_shape() -> KindRead:
            return KindRead(kind, await load(), previous)

        return shared_activity_reads.start(key, load_and_shape, window_s, read_keys[kind])

    reads = {
        "alert.triggered": shared(
            "alert.triggered",
            ("alerts", audience.tenant or ""),
            lambda: activity.recent_alerts(audience.tenant, READ_LIMIT),
        ),
        "delivery.failed": shared(
            "delivery.failed",
            ("deliveries", audience.tenant or ""),
            lambda: activity.recent_failed_deliveries(audience.tenant, READ_LIMIT),
        ),
        "notification.created": shared(
            "notification.created",
            ("notifications", audience.user_id),
            lambda: activity.recent_notifications(audience.user_id, READ_LIMIT),
        ),
    }
    if audience.review_scope is not None:  # without a review capability the read is never issued
        scope = audience.review_scope
        reads["review.status.changed"] = shared(
            "review.status.changed", ("reviews", scope), lambda: activity.recent_review_events(scope, READ_LIMIT)
        )
    # Started together above, awaited one by one here.
    return {kind: await asyncio.shield(read) for kind, read in reads.items()}


def _resume_time(last_event_id: str | None) -> datetime | None:
    if not last_event_id:
        return None
    try:
        resume = datetime.fromisoformat(last_event_id.split("|", 1)[0].replace("Z", "+00:00"))
    except ValueError:
        return None
    return resume if resume.tzinfo else None


@functools.lru_cache(maxsize=4096)
def _cursor(at: datetime) -> bytes:
    """The cursor frame at ``at``: every stream of an audience sends the same one."""
    return cursor_frame(f"{_id_time(at)}|cursor|")


def _batch(events: list[Event], first: bool) -> bytes:
    """``events`` in time order as one chunk; the first frame of a connection carries ``retry``."""
    chunks = []
    for event in sorted(events, key=lambda e: e.order):
        frame = event.shared_frame if chunks or not first else event.frame(RETRY_MS)
        if frame is not None:
            chunks.append(frame)
    return b"".join(chunks)


async def notification_frames(audience: Audience, last_event_id: str | None) -> AsyncIterator[bytes]:
    """Replay (or resume), then new rows as they are notified (``change_feed``). Whatever existed
    when the connection opened and was not replayed (notifications) is seen, never sent; a cursor
    frame after each batch records the newest row seen, so a reconnect resumes after it — not
    after the last *sent* row, which would re-send those seeded rows as new. What a stream has
    seen is its last read (shared with the other streams of its audience): a row that was not in
    it is new."""
    timing = stream_timing(NOTIFICATIONS_POLL_INTERVAL_MS, NOTIFICATIONS_MAX_DURATION_S)
    deadline = timing.deadline()
    resume_from = _resume_time(last_event_id)
    seen: dict[str, KindRead] | None = None  # the last read (shared by the audience); None: not connected yet
    cursor_at: datetime | None = None
    watch = ChangeWatch(timing, audience_keys(audience))

    def start_read() -> asyncio.Future[dict[str, KindRead]]:
        return start_activity_read(audience, watch.read_keys(), watch.share_window_s())

    async with contextlib.aclosing(
        watch.reads(deadline, audience, start_read, "/api/notifications/events", user=audience.user_id)
    ) as reads:
        async for read in reads:
            if read is KEEP_ALIVE:
                yield KEEP_ALIVE_FRAME
                continue
            first = seen is None
            chunk = _batch(_outgoing(read, seen, resume_from), first)
            seen = read
            newest = max((kind.newest for kind in read.values() if kind.newest is not None), default=None)
            if newest is not None and (cursor_at is None or newest > cursor_at):
                cursor_at = newest
            if cursor_at is not None and (chunk or first):
                chunk += _cursor(cursor_at)
            if chunk:
                yield chunk


def _outgoing(
    reads: dict[str, KindRead], seen: dict[str, KindRead] | None, resume_from: datetime | None
) -> list[Event]:
    """What this read has for a stream whose last read was ``seen`` (``None``: the connect —
    replay the replayed kinds, or, resuming, everything after ``resume_from``)."""
    if seen is None and resume_from is None:
        return [event for kind in REPLAYED_KINDS if kind in reads for event in reads[kind].replay()]
    if seen is None:
        return [event for read in reads.values() for event in read.events if event.at > resume_from]
    return [
        event for kind, read in reads.items() for event in read.unseen(seen[kind].ids if kind in seen else NONE_SEEN)
    ]


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
    """What the polling fallback reads: the same items, with the same authorization."""
    audience = audience_for(require_session(request))
    reads = await start_activity_read(audience, dict.fromkeys(audience_keys(audience)), 0)  # window 0: a fresh read
    items = {kind: [event.payload for event in read.events] for kind, read in reads.items()}
    return JSONResponse(
        {
            "notifications": items["notification.created"],
            "unreadCount": await activity.unread_notification_count(audience.user_id),
            "alerts": items["alert.triggered"],
            "reviewEvents": items.get("review.status.changed", []),
            "deliveryFailures": items["delivery.failed"],
        }
    )
