"""The notification stream's events: how a row of the stream log becomes the event a stream
sends — its kind's table (``SOURCES``), its payload (``KINDS``), checked by the kind's contract
(``lib.contracts.stream_events``) and serialised once (``to_event``) — and one read of a
channel so shaped (``KindPage``).

Shared by the two places a channel's rows are read: a stream process's own read
(``notification_reads``) and the change detector's, which tells every process following the
channel the rows it positioned, already shaped (``detector``, ``tails``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lib.clock import iso_timestamp
from lib.egress.destinations import redact_url
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error
from lib.platform import activity
from lib.streams.sse import event_body

pydantic = lazy_import("pydantic")
stream_events = lazy_import("lib.contracts.stream_events")


@dataclass(frozen=True)
class Event:
    """One logged row as its stream event: ``body`` is the frame's event and data, serialised
    once for every stream that sends it (``None``: it cannot be encoded, never sent);
    ``payload`` the event's data — ``None`` for an event told on the bus, which carries the body
    alone (``tails``)."""

    kind: str
    row_id: str
    position: int
    payload: dict[str, Any] | None
    body: bytes | None


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
        # Rows logged before endpoints were stored redacted still show only scheme and host.
        "endpoint": redact_url(row["endpoint"]),
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


# Each kind's row → payload; its contract is the kind's model in ``STREAM_EVENTS``.
KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "alert.triggered": _alert,
    "review.status.changed": _review,
    "delivery.failed": _delivery,
    "notification.created": _notification,
}
SOURCES = {
    "alert.triggered": activity.ALERTS,
    "review.status.changed": activity.REVIEWS,
    "delivery.failed": activity.DELIVERIES,
    "notification.created": activity.NOTIFICATIONS,
}


def to_event(kind: str, position: int, row: dict[str, Any], initial: bool) -> Event | None:
    """``row`` as an event of ``kind``, through its contract; ``None`` (reported) if it breaks it."""
    contract = stream_events.STREAM_EVENTS[kind]
    try:
        payload = contract.model_validate({**KINDS[kind](row), "initial": initial}).model_dump()
    except pydantic.ValidationError as error:
        log_server_error(
            "/api/notifications/events",
            f"dropped a {kind} row that breaks its contract",
            row=row["id"],
            problems=str(error.error_count()),
        )
        return None
    return Event(kind, str(row["id"]), position, payload, event_body(kind, payload))


@dataclass(frozen=True)
class KindPage:
    """One read of one channel, shaped once for every stream that shares it: its events (rows
    that are gone or break their contract are skipped), the position it read up to, the
    channel's retention horizon, and whether there may be more (a full page)."""

    events: list[Event]
    head: int
    pruned_through: int
    full: bool


# The kind of event each channel's rows are (a channel's name is ``<prefix>|<value>``); draft
# channels are not events of this stream (the feed and story streams read the drafts).
KIND_OF_PREFIX = {
    "alerts": "alert.triggered",
    "review": "review.status.changed",
    "deliveries": "delivery.failed",
    "user": "notification.created",
}


def kind_of_channel(channel: str) -> str | None:
    return KIND_OF_PREFIX.get(channel.partition("|")[0])


def shaped(kind: str, read: activity.ChannelRead, initial: bool) -> KindPage:
    """A channel's read as its events: rows gone since they were logged, and rows that break
    their contract (reported), are passed over — their positions still count."""
    events = (to_event(kind, position, row, initial) for position, row in read.rows if row is not None)
    return KindPage([e for e in events if e is not None], read.head, read.pruned_through, read.full)
