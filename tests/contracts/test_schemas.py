"""lib.contracts.schemas: the committed JSON Schemas are the models' (a model changed without
``scripts/contracts`` fails here), and every event the streams send and every topic has one."""

from __future__ import annotations

import json

from lib.contracts.queue_messages import QUEUE_MESSAGES
from lib.contracts.schemas import contract_schemas, schema_text
from lib.contracts.stream_events import STREAM_EVENTS
from lib.local.paths import PROJECT_ROOT
from lib.queues.topics import RSS_QUEUE_TOPICS, WEBHOOK_DELIVERY_TOPIC
from lib.streams.events import KINDS
from lib.streams.sse import CURSOR_EVENT, END_EVENT

SCHEMAS = PROJECT_ROOT / "contracts" / "schemas"


def test_every_committed_schema_is_what_its_model_generates() -> None:
    generated = contract_schemas()
    committed = {str(path.relative_to(SCHEMAS)): path.read_text(encoding="utf-8") for path in SCHEMAS.rglob("*.json")}
    assert sorted(committed) == sorted(generated), "run scripts/contracts"
    for relative, schema in generated.items():
        assert committed[relative] == schema_text(schema), f"{relative} is stale: run scripts/contracts"


def test_every_stream_event_and_every_topic_has_a_closed_schema() -> None:
    assert {CURSOR_EVENT, END_EVENT, "stream.reset", "feed.changed", "story.phase"} <= set(STREAM_EVENTS)
    assert set(KINDS) <= set(STREAM_EVENTS)  # the models frames are built by
    assert {*RSS_QUEUE_TOPICS.values(), WEBHOOK_DELIVERY_TOPIC} == set(QUEUE_MESSAGES)
    for path in SCHEMAS.rglob("*.json"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        assert schema["type"] == "object" and schema["additionalProperties"] is False, path
