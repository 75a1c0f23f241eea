"""The queue's topics: logical names in code and logs (``rss.ingest``), wire names on the
queue service, which accepts only ``[A-Za-z0-9_-]`` (``rss-ingest``), and the dead-letter
topic of each (``rss-ingest-dlq``). The four ``rss.*`` topics are the aggregation pipeline;
``webhooks.deliver`` carries the wake-ups of webhook deliveries (``lib.platform.alerts.webhooks``)."""

from __future__ import annotations

import re
from typing import Final

RSS_QUEUE_TOPICS: Final[dict[str, str]] = {
    "ingest": "rss.ingest",
    "enrich": "rss.enrich",
    "cluster": "rss.cluster",
    "synthesize": "rss.synthesize",
}
WEBHOOK_DELIVERY_TOPIC: Final = "webhooks.deliver"
_WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def wire_topic(logical: str) -> str:
    """``rss.ingest`` → ``rss-ingest``; refuses a name the service would refuse."""
    wire = logical.replace(".", "-")
    if not _WIRE_NAME.match(wire):
        raise ValueError(f"topic {logical!r} has no valid wire name")
    return wire


def dlq_topic(logical: str) -> str:
    return wire_topic(logical) + "-dlq"
