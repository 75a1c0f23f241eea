"""The realtime event payloads (spec: "Event payloads", ``stream-events.ts``), exact field
names and literal sets. The notification stream's four events, the feed watermark and the
story phase. ``parse_json_with_schema`` answers ``None`` — never raises — for malformed or
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


Model = TypeVar("Model", bound=BaseModel)


def parse_json_with_schema(raw: str | bytes | None, schema: type[Model]) -> Model | None:
    if raw is None:
        return None
    try:
        return schema.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None
