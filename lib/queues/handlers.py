"""The ``rss.ingest`` consumer's handler (spec: "Consumer routes" and "The honest state of it").

- ``rss.ingest`` re-checks ``rssQueuePipeline`` and acknowledges without work when it is off
  (a message in flight during a flag flip must not run an unwanted build); otherwise it runs
  the same global-catalog refresh as the inline path — never tenant scopes.
The reserved stages' handler is in ``lib.queues.reserved``, so their functions do not load the
aggregation build at cold start.
"""

from __future__ import annotations

import sys
from typing import Any

from lib.clock import iso_timestamp
from lib.db.state_store import set_state
from lib.platform.aggregation.sources import GLOBAL_SCOPE
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.platform.flags import is_feature_enabled
from lib.queues.publish import MessageMetadata

# The last batch the ingest consumer completed: how scripts/pipeline confirms a run.
LAST_INGEST_RUN_KEY = "platform:queues:rss.ingest:last-run"


async def handle_rss_ingest(message: dict[str, Any], metadata: MessageMetadata) -> None:
    batch = message.get("batchId")
    if not await is_feature_enabled("rssQueuePipeline"):
        sys.stderr.write(f"[queues:{metadata.topic}] pipeline flag is off; acknowledging batch={batch} without work\n")
        return
    sys.stderr.write(f"[queues:{metadata.topic}] running aggregation refresh batch={batch}\n")
    await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    await set_state(LAST_INGEST_RUN_KEY, {"batchId": batch, "completedAt": iso_timestamp()})
