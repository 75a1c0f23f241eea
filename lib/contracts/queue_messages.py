"""What travels on each queue topic (spec: "Scheduled jobs and queues" — ``publishRssMessage``,
the consumer wrapper's DLQ payload), as typed models: the source of the committed JSON Schemas
in ``contracts/schemas/messages/`` (``lib.contracts.schemas``).

- The four ``rss.*`` topics carry one message: ``RssQueueMessage`` is what a producer hands to
  ``publish_message``; ``SignedRssQueueMessage`` is that message signed (plus ``signedAt``
  and ``signature``), what is on the queue. ``publish_message`` checks the signed message
  before sending it, and the consumer checks it again after the signature verifies. A message
  that verifies but does not match is dead-lettered at once with the reason (retrying cannot
  fix it), so a producer's version skew shows in the operators' queue view.
- ``webhooks.deliver`` carries ``SignedWebhookWakeup``: "attempt delivery ``deliveryId`` now",
  for the attempt due at ``dueAt`` (``lib.platform.alerts.webhooks``).
- The ``-dlq`` topics carry ``DeadLetterMessage``.

Models are strict and closed (no coercion, no unknown fields): a field a producer adds is a
contract change, made here first, so both languages learn of it from the schema.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lib.queues.topics import RSS_QUEUE_TOPICS, WEBHOOK_DELIVERY_TOPIC

ISO_INSTANT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"
DLQ_ERROR_MESSAGE_CHARS = 500


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RssQueueMessage(_Message):
    """One aggregation refresh: ``sourceId`` is ``all-sources`` and ``feedUrl`` empty for the
    whole-catalog build, the only producer today."""

    batchId: Annotated[str, Field(min_length=1, max_length=200)]
    sourceId: Annotated[str, Field(min_length=1, max_length=200)]
    feedUrl: Annotated[str, Field(max_length=2048)]
    requestedAt: Annotated[str, Field(pattern=ISO_INSTANT)]


class SignedRssQueueMessage(RssQueueMessage):
    """As delivered: ``signedAt`` (ms since the epoch) is absent only in the previous format."""

    signedAt: Annotated[int, Field(ge=0, le=2**53 - 1)] | None = None
    signature: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class WebhookWakeup(_Message):
    """Wake webhook delivery ``deliveryId`` (its alert's id) for the attempt due at ``dueAt``."""

    deliveryId: Annotated[str, Field(min_length=1, max_length=200)]
    dueAt: Annotated[str, Field(pattern=ISO_INSTANT)]
    requestedAt: Annotated[str, Field(pattern=ISO_INSTANT)]


class SignedWebhookWakeup(WebhookWakeup):
    signedAt: Annotated[int, Field(ge=0, le=2**53 - 1)]
    signature: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class DeadLetterMessage(_Message):
    originalMessageId: str
    originalTopic: str
    deliveryCount: Annotated[int, Field(ge=1)]
    failedAt: Annotated[str, Field(pattern=ISO_INSTANT)]
    errorMessage: Annotated[str, Field(max_length=DLQ_ERROR_MESSAGE_CHARS)]


QUEUE_MESSAGES: dict[str, type[BaseModel]] = {
    **{topic: SignedRssQueueMessage for topic in RSS_QUEUE_TOPICS.values()},
    WEBHOOK_DELIVERY_TOPIC: SignedWebhookWakeup,
}
"""The signed message each topic carries."""


class InvalidMessage(ValueError):
    """A message that does not match its topic's contract; the text names each field and what
    is wrong with it, never the value."""


def contract_problems(model: type[BaseModel], payload: object) -> str | None:
    """Why ``payload`` is not a ``model`` (``batchId: Field required; count: Extra inputs are
    not permitted``), or ``None``."""
    try:
        model.model_validate(payload)
    except ValidationError as error:
        return "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'message'}: {problem['msg']}"
            for problem in error.errors(include_url=False, include_input=False)
        )
    return None


def check_message(model: type[BaseModel], payload: object) -> None:
    problems = contract_problems(model, payload)
    if problems is not None:
        raise InvalidMessage(f"not a {model.__name__}: {problems}")
