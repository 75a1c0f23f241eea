"""lib.ops.pipeline's refusals, and the push bridge's reading of vercel.json (the happy path
runs against the dev server in tests/local/test_dev_server.py)."""

from __future__ import annotations

import httpx
import pytest

from lib.local.paths import PROJECT_ROOT
from lib.local.queue_bridge import queue_triggers
from lib.ops.pipeline import PipelineError, enable


async def test_enable_refuses_without_a_signing_secret(set_env) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET=None)
    async with httpx.AsyncClient(base_url="http://127.0.0.1:9") as client:
        with pytest.raises(PipelineError, match="ERMIS_QUEUE_SIGNING_SECRET is not set"):
            await enable(client, {"queueSigningSecretSet": False})


def test_push_bridge_routes_each_wire_topic_to_its_consumer_under_vercels_name() -> None:
    assert {(t.topic, t.path, t.consumer) for t in queue_triggers(PROJECT_ROOT)} == {
        *(
            (f"rss-{stage}", f"/api/queues/rss/{stage}", f"api_Squeues_Srss_S{stage}_Dpy")
            for stage in ("ingest", "enrich", "cluster", "synthesize")
        ),
        ("webhooks-deliver", "/api/queues/webhooks/deliver", "api_Squeues_Swebhooks_Sdeliver_Dpy"),
    }
