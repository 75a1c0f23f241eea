"""Vercel's push delivery, locally: the SDK's embedded queue service plus a loop that leases
each visible message as a push delivery and POSTs it to the consumer route bound to its topic
in ``vercel.json`` (``experimentalTriggers`` of type ``queue/v2beta``), under the consumer name
Vercel gives that function (``lib.queues.consumer_names``) — so a consumer subscribed under any
other name fails here exactly as it would on Vercel.

The consumer then acknowledges, retries (``RetryAfter``) or dead-letters through
``VERCEL_QUEUE_BASE_URL`` exactly as on Vercel; the embedded service runs on the real clock, so
a retried message comes back after its backoff.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse
from vercel.queue.devserver import EmbeddedQueueDevServer

from lib.bundle import read_vercel_config
from lib.local.routing import route_for_file
from lib.queues.consumer_names import vercel_consumer_name

PUSH_INTERVAL_SECONDS = 0.25


@dataclass(frozen=True)
class QueueTrigger:
    topic: str  # wire topic
    path: str  # the consumer function's route
    consumer: str  # Vercel's consumer name for that function


def queue_triggers(project_root: Path) -> list[QueueTrigger]:
    """Every ``queue/v2beta`` trigger in ``vercel.json``."""
    config = read_vercel_config(project_root)
    return [
        QueueTrigger(trigger["topic"], route_for_file(file).pattern, vercel_consumer_name(file))
        for file, settings in config.get("functions", {}).items()
        for trigger in settings.get("experimentalTriggers", [])
        if trigger.get("type") == "queue/v2beta"
    ]


class PushBridge:
    def __init__(self, server: EmbeddedQueueDevServer, base_url: str, triggers: list[QueueTrigger], say: Any) -> None:
        self.server, self.base_url, self.triggers, self.say = server, base_url, triggers, say

    async def push_once(self, client: httpx.AsyncClient) -> int:
        delivered = 0
        for trigger in self.triggers:
            for delivery in self.server.iter_push_deliveries(trigger.topic, trigger.consumer):
                response = await client.post(trigger.path, content=delivery.body, headers=delivery.headers)
                count = delivery.headers.get("ce-vqsdeliverycount")
                self.say(
                    f"[queue] push {trigger.topic} delivery {count} as {trigger.consumer}"
                    f" -> {trigger.path} {response.status_code}"
                )
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
