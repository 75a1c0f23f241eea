"""The pipeline's topics: logical names in code and logs (``rss.ingest``), wire names on the
queue service, which accepts only ``[A-Za-z0-9_-]`` (``rss-ingest``), and the dead-letter
topic of each (``rss-ingest-dlq``)."""

from __future__ import annotations

import re
from typing import Final

RSS_QUEUE_TOPICS: Final[dict[str, str]] = {
    "ingest": "rss.ingest",
    "enrich": "rss.enrich",
    "cluster": "rss.cluster",
    "synthesize": "rss.synthesize",
}
_WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def wire_topic(logical: str) -> str:
    """``rss.ingest`` → ``rss-ingest``; refuses a name the service would refuse."""
    wire = logical.replace(".", "-")
    if not _WIRE_NAME.match(wire):
        raise ValueError(f"topic {logical!r} has no valid wire name")
    return wire


def dlq_topic(logical: str) -> str:
    return wire_topic(logical) + "-dlq"
