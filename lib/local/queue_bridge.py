"""Vercel's push delivery, locally: the SDK's embedded queue service plus a loop that leases
each visible message as a push delivery and POSTs it to the consumer route bound to its topic
in ``vercel.json`` (``experimentalTriggers`` of type ``queue/v2beta``).

The consumer then acknowledges, retries (``RetryAfter``) or dead-letters through
``VERCEL_QUEUE_BASE_URL`` exactly as on Vercel; the embedded service runs on the real clock, so
a retried message comes back after its backoff.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from vercel.queue.devserver import EmbeddedQueueDevServer

from lib.jobs.schedule import read_vercel_config
from lib.local.routing import route_for_file

PUSH_INTERVAL_SECONDS = 0.25


def queue_triggers(project_root: Path) -> dict[str, str]:
    """wire topic → consumer route path, from ``vercel.json``."""
    config = read_vercel_config(project_root)
    triggers: dict[str, str] = {}
    for file, settings in config.get("functions", {}).items():
        for trigger in settings.get("experimentalTriggers", []):
            if trigger.get("type") == "queue/v2beta":
                triggers[trigger["topic"]] = route_for_file(file).pattern
    return triggers


class PushBridge:
    def __init__(self, server: EmbeddedQueueDevServer, base_url: str, triggers: dict[str, str], say: Any) -> None:
        self.server, self.base_url, self.triggers, self.say = server, base_url, triggers, say

    async def push_once(self, client: httpx.AsyncClient) -> int:
        delivered = 0
        for topic, path in self.triggers.items():
            for delivery in self.server.iter_push_deliveries(topic, topic):
                response = await client.post(path, content=delivery.body, headers=delivery.headers)
                count = delivery.headers.get("ce-vqsdeliverycount")
                self.say(f"[queue] push {topic} delivery {count} -> {path} {response.status_code}")
                delivered += 1
        return delivered

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=310) as client:
            while not stop.is_set():
                try:
                    await self.push_once(client)
                except httpx.HTTPError as error:
                    self.say(f"[queue] push failed: {error}")
                try:
                    await asyncio.wait_for(stop.wait(), timeout=PUSH_INTERVAL_SECONDS)
                except TimeoutError:
                    pass

    def depths(self) -> dict[str, dict[str, int]]:
        """Messages per topic on the embedded service, and how many are not yet acknowledged."""
        return {
            topic: {"messages": len(messages), "unacknowledged": sum(not m.acknowledged for m in messages)}
            for topic, messages in self.server.state.by_topic.items()
        }

    async def depths_endpoint(self, _request: Request) -> JSONResponse:
        return JSONResponse({"topics": self.depths()})
