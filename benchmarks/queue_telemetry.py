"""The consumer wrapper's telemetry write: deliveries per second with and without it.

Signed messages are sent to the SDK's embedded queue service and pushed to a consumer route
(``create_queue_consumer`` with a handler that does nothing, so the wrapper's own cost is what is
measured: verify, claim, finish, count). Each round runs both variants on fresh messages, one
after the other, 16 deliveries in flight at a time; "without" replaces the wrapper's
``record_delivery`` with a no-op for its round. Statements are every query the bundle sent
(``counting_statements``), per delivery. Target: the telemetry costs one statement per delivery.

Run: ``.venv/bin/python -m benchmarks.queue_telemetry``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import httpx
from vercel.queue.devserver import embedded_queue_dev_server

import lib.queues.consumer as consumer_module
from benchmarks.services import benchmark_services, counting_statements
from lib.auth.gates import QUEUE_MESSAGE_HMAC
from lib.bundle import bundle_relative_path
from lib.db.pool import close_pools
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.local.dev import EMBEDDED_QUEUE_TOKEN
from lib.queues.consumer import create_queue_consumer
from lib.queues.consumer_names import vercel_consumer_name
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.topics import wire_topic
from lib.settings import get_settings
from tests.support.queue import rss_message

TOPIC = "rss.enrich"
MESSAGES_PER_ROUND = 400
ROUNDS = 3
IN_FLIGHT = 16


async def do_nothing(_message: dict[str, Any], _metadata: MessageMetadata) -> None:
    return None


async def no_telemetry(*_args: Any, **_kwargs: Any) -> None:
    return None


async def round_of_deliveries(server: Any, app: Any, consumer: str) -> tuple[float, int]:
    """Seconds to push ``MESSAGES_PER_ROUND`` fresh messages, and the deliveries made."""
    for _ in range(MESSAGES_PER_ROUND):
        await publish_message(TOPIC, rss_message(str(uuid.uuid4())))
    deliveries = list(server.iter_push_deliveries(wire_topic(TOPIC), consumer))
    gate = asyncio.Semaphore(IN_FLIGHT)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench.test") as client:

        async def deliver(delivery: Any) -> None:
            async with gate:
                response = await client.post("/consume", content=delivery.body, headers=delivery.headers)
                assert response.status_code == 200, response.text

        started = time.perf_counter()
        await asyncio.gather(*(deliver(delivery) for delivery in deliveries))
        return time.perf_counter() - started, len(deliveries)


async def measure(server: Any) -> dict[str, dict[str, float]]:
    receive = create_queue_consumer(TOPIC, do_nothing, module_file=__file__)
    app = function_app(route("/consume", POST=guarded(QUEUE_MESSAGE_HMAC, receive)))
    consumer = vercel_consumer_name(bundle_relative_path(__file__))
    real = consumer_module.record_delivery
    totals = {name: {"seconds": 0.0, "deliveries": 0, "statements": 0} for name in ("with", "without")}
    for _ in range(ROUNDS):
        for name in ("without", "with"):
            consumer_module.record_delivery = real if name == "with" else no_telemetry  # type: ignore[assignment]
            try:
                with counting_statements() as counted:
                    seconds, deliveries = await round_of_deliveries(server, app, consumer)
            finally:
                consumer_module.record_delivery = real  # type: ignore[assignment]
            totals[name]["seconds"] += seconds
            totals[name]["deliveries"] += deliveries
            # Less the publishes' own statement (each counts its message), the same in both.
            totals[name]["statements"] += counted["all"] - MESSAGES_PER_ROUND
    await close_pools()
    return totals


def main() -> None:
    with benchmark_services(), embedded_queue_dev_server(manual_clock=True) as server:
        os.environ.update(
            VERCEL_QUEUE_BASE_URL=server.base_url,
            VERCEL_QUEUE_API_TOKEN=EMBEDDED_QUEUE_TOKEN,
            VERCEL_REGION="iad1",
            ERMIS_QUEUE_SIGNING_SECRET="benchmark-signing-secret",  # noqa: S106 - this run's own secret
        )
        get_settings.cache_clear()
        totals = asyncio.run(measure(server))
    print(f"{ROUNDS} rounds x {MESSAGES_PER_ROUND} deliveries, {IN_FLIGHT} in flight, no-op handler")
    print("| telemetry | deliveries/s | statements per delivery |")
    print("|---|---|---|")
    for name in ("without", "with"):
        row = totals[name]
        rate = row["deliveries"] / row["seconds"]
        print(f"| {name} | {rate:,.0f} | {row['statements'] / row['deliveries']:.2f} |")
    ratio = (totals["with"]["deliveries"] / totals["with"]["seconds"]) / (
        totals["without"]["deliveries"] / totals["without"]["seconds"]
    )
    print(f"with / without: {ratio:.2f}x the delivery rate")


if __name__ == "__main__":
    main()
