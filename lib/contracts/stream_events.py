"""The realtime event payloads (spec: "Event payloads", ``stream-events.ts``), exact field
names and literal sets: the notification stream's four events, the feed watermark, the story
phase, and the streams' own control events (``stream.cursor``, ``stream.reset``,
``stream.end``). ``STREAM_EVENTS`` names each event's model; it is the one source of the
committed JSON Schemas (``contracts/schemas/events/``), of the browser client's validators and
of its TypeScript declarations (``lib.contracts.schemas``). The server builds every frame's data
through its model; ``parse_json_with_schema`` answers ``None`` — never raises — for malformed or
schema-violating input, so a bad frame is dropped and the connection keeps running.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlertTriggered(_Payload):
    id: str
    ruleId: str | None
    storyId: str
    title: str
    severity: Literal["info", "warning", "critical"]
    channel: Literal["in-app", "email", "webhook"]
    deliveredAt: str
    initial: bool


class ReviewStatusChanged(_Payload):
    id: str
    storyId: str
    headline: str
    action: Literal["submitted", "approved", "rejected", "returned_to_compose", "resynthesized"]
    tenantScopeId: str | None
    changedAt: str
    initial: bool


class DeliveryFailed(_Payload):
    id: str
    deliveryId: str
    tenant: str
    method: Literal["webhook", "email", "feed", "cms", "wordpress", "api"]
    responseCode: int
    endpoint: str
    createdAt: str
    initial: bool


class NotificationCreated(_Payload):
    id: str
    title: str
    body: str
    type: Literal["alert", "system", "billing", "review", "note", "publication"]
    read: bool
    createdAt: str
    initial: bool


class FeedChanged(_Payload):
    latestUpdatedAt: str | None
    draftCount: int


class StoryPhase(_Payload):
    storyId: str
    phase: str
    status: str
    updatedAt: str


class StreamCursor(_Payload):
    """Moves the client's ``Last-Event-ID`` past rows it has seen; carries nothing."""


class StreamReset(_Payload):
    """The stream could not resume from the client's ``Last-Event-ID``: re-read the snapshot."""

    reason: Literal["expired", "upgraded", "malformed", "foreign", "audience_changed"]


class StreamEnd(_Payload):
    """The stream ends as planned; reconnect at once from the last id. ``token_expired``: its
    session's token expired (the stream lives no longer than the session that opened it), so
    the reconnect needs the fresh session the page's auth keeps in the cookie; no reason: its
    self-close or the server stopping."""

    reason: Literal["token_expired"] | None = None


STREAM_EVENTS: dict[str, type[BaseModel]] = {
    "alert.triggered": AlertTriggered,
    "review.status.changed": ReviewStatusChanged,
    "delivery.failed": DeliveryFailed,
    "notification.created": NotificationCreated,
    "feed.changed": FeedChanged,
    "story.phase": StoryPhase,
    "stream.cursor": StreamCursor,
    "stream.reset": StreamReset,
    "stream.end": StreamEnd,
}


Model = TypeVar("Model", bound=BaseModel)


def parse_json_with_schema(raw: str | bytes | None, schema: type[Model]) -> Model | None:
    if raw is None:
        return None
    try:
        return schema.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None
