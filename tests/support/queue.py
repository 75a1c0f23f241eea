"""The vercel-queue SDK's embedded queue service on loopback, and the push loop Vercel runs:
lease each visible message as a push delivery and POST it to the consumer route."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.types import ASGIApp
from vercel.queue.devserver import EmbeddedQueueDevServer, embedded_queue_dev_server

from lib.clock import iso_timestamp
from tests.support.functions import client_for


def rss_message(batch_id: str) -> dict[str, Any]:
    """A whole ``rss.*`` message (``lib.contracts.queue_messages.RssQueueMessage``), unsigned."""
    return {"batchId": batch_id, "sourceId": "all-sources", "feedUrl": "", "requestedAt": iso_timestamp()}


@dataclass
class EmbeddedQueue:
    server: EmbeddedQueueDevServer

    def messages(self, wire_topic: str) -> list[Any]:
        return list(self.server.state.by_topic.get(wire_topic, []))

    def payloads(self, wire_topic: str) -> list[dict[str, Any]]:
        return [json.loads(message.payload.read()) for message in self.messages(wire_topic)]

    def advance(self, seconds: float) -> None:
        self.server.state.shift(seconds)

    async def push(
        self, wire_topic: str, app: ASGIApp, path: str, consumer: str, concurrently: bool = False
    ) -> list[httpx.Response]:
        """Deliver every visible message of the topic to the route as ``consumer``, as Vercel's
        push would: one after the other, or all leased first and then posted at the same moment."""
        async with client_for(app) as client:
            if concurrently:
                deliveries = list(self.server.iter_push_deliveries(wire_topic, consumer))
                return list(
                    await asyncio.gather(*(client.post(path, content=d.body, headers=d.headers) for d in deliveries))
                )
            return [
                await client.post(path, content=delivery.body, headers=delivery.headers)
                for delivery in self.server.iter_push_deliveries(wire_topic, consumer)
            ]


@contextmanager
def embedded_queue(set_env) -> Iterator[EmbeddedQueue]:
    with embedded_queue_dev_server(manual_clock=True) as server:
        set_env(
            VERCEL_QUEUE_BASE_URL=server.base_url,
            VERCEL_QUEUE_API_TOKEN="local-token",
            VERCEL_REGION="iad1",
            VERCEL_DEPLOYMENT_ID=None,
        )
        yield EmbeddedQueue(server)
