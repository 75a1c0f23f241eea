"""The four consumers' handlers (spec: "Consumer routes" and "The honest state of it").

- ``rss.ingest`` re-checks ``rssQueuePipeline`` and acknowledges without work when it is off
  (a message in flight during a flag flip must not run an unwanted build); otherwise it runs
  the same global-catalog refresh as the inline path — never tenant scopes.
- ``rss.enrich``, ``rss.cluster``, ``rss.synthesize`` are reserved: they fail loudly, so a
  producer wired before the stage exists surfaces on the DLQ instead of dropping work.
"""

from __future__ import annotations

import sys
from typing import Any

from lib.clock import iso_timestamp
from lib.db.state_store import set_state
from lib.platform.aggregation.sources import GLOBAL_SCOPE
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.platform.flags import is_feature_enabled
from lib.queues.publish import RssHandler, RssMessageMetadata

# The last batch the ingest consumer completed: how scripts/pipeline confirms a run.
LAST_INGEST_RUN_KEY = "platform:queues:rss.ingest:last-run"


async def handle_rss_ingest(message: dict[str, Any], metadata: RssMessageMetadata) -> None:
    batch = message.get("batchId")
    if not await is_feature_enabled("rssQueuePipeline"):
        sys.stderr.write(f"[queues:{metadata.topic}] pipeline flag is off; acknowledging batch={batch} without work\n")
        return
    sys.stderr.write(f"[queues:{metadata.topic}] running aggregation refresh batch={batch}\n")
    await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    await set_state(LAST_INGEST_RUN_KEY, {"batchId": batch, "completedAt": iso_timestamp()})


def not_implemented(topic: str) -> RssHandler:
    async def refuse(_message: dict[str, Any], metadata: RssMessageMetadata) -> None:
        sys.stderr.write(f"[queues:{topic}] received message {metadata.message_id} for a reserved stage\n")
        raise RuntimeError(f"{topic} consumer is not implemented; do not enable a producer for this topic")

    return refuse
