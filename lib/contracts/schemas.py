"""The committed JSON Schemas: one file per stream event (``contracts/schemas/events/<event>.json``)
and per queue message (``contracts/schemas/messages/<topic>.json``), generated from the models in
``stream_events`` and ``queue_messages`` — the only place a contract is written by hand. Other
languages validate against these files; ``contracts/generate-client.mjs`` turns the event schemas
into the browser client's validators and TypeScript declarations. ``scripts/contracts`` rewrites
them; a test fails when a model and its committed schema disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from lib.contracts.queue_messages import QUEUE_MESSAGES, DeadLetterMessage
from lib.contracts.stream_events import STREAM_EVENTS
from lib.queues.topics import dlq_topic, wire_topic

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _ContractSchema(GenerateJsonSchema):
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False  # "Batchid" says nothing the property name does not, and would name a type


def _schema(model: type[BaseModel], title: str, description: str) -> dict[str, Any]:
    schema = model.model_json_schema(schema_generator=_ContractSchema)
    return {"$schema": SCHEMA_DIALECT, **schema, "title": title, "description": description}


def contract_schemas() -> dict[str, dict[str, Any]]:
    """Each committed schema by its path under ``contracts/schemas``."""
    schemas = {
        f"events/{event}.json": _schema(model, event, f"The data of the `{event}` server-sent event.")
        for event, model in STREAM_EVENTS.items()
    }
    for topic, model in QUEUE_MESSAGES.items():
        schemas[f"messages/{topic}.json"] = _schema(
            model, topic, f"A message on the `{wire_topic(topic)}` queue topic, as delivered (signed)."
        )
    schemas["messages/dead-letter.json"] = _schema(
        DeadLetterMessage,
        "dead-letter",
        f"A message on a `-dlq` topic (for example `{dlq_topic('rss.ingest')}`): the summary of one that failed.",
    )
    return schemas


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Rewrite ``directory`` (``contracts/schemas``) to hold exactly the current schemas."""
    wanted = {directory / relative: schema_text(schema) for relative, schema in contract_schemas().items()}
    for stale in directory.rglob("*.json"):
        if stale not in wanted:
            stale.unlink()
    for path, text in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return sorted(wanted)
