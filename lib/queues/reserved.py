"""The reserved stages (spec: "The honest state of it"): ``rss.enrich``, ``rss.cluster`` and
``rss.synthesize`` fail loudly, so a producer wired before the stage exists surfaces on the DLQ
instead of dropping work."""

from __future__ import annotations

import sys
from typing import Any

from lib.queues.publish import MessageHandler, MessageMetadata


def not_implemented(topic: str) -> MessageHandler:
    async def refuse(_message: dict[str, Any], metadata: MessageMetadata) -> None:
        sys.stderr.write(f"[queues:{topic}] received message {metadata.message_id} for a reserved stage\n")
        raise RuntimeError(f"{topic} consumer is not implemented; do not enable a producer for this topic")

    return refuse
