"""Outbound requests (issue 35): one tenant's dead receiver does not slow the others, and what the
egress guard costs a request.

1. **Isolation.** 100 tenants on one built catalog, each with a webhook rule matching its story,
   swept by the alert sweep (``evaluate_instant_alert_rules_for_all_tenants``, a pool of 5).
   Run A: every receiver answers. Run B: the first tenant's endpoint accepts the connection and
   never answers (held until ``ERMIS_WEBHOOK_TIMEOUT_S``, 5 s). Reported: the time until the
   other 99 receivers had their alert (the last arrival, from the sweep's start), both runs, and
   the ratio (goal: B within 10 % of A).
2. **The guard's cost.** 300 POSTs, one after another, to the same loopback receiver (allowed in
   ``ERMIS_EGRESS_ALLOW``), each with a fresh client as a delivery attempt makes them: through
   ``GuardedSession`` and through a plain ``httpx.AsyncClient`` with the same TLS context (and,
   for the record, httpx's default client, which loads its CA bundle per client, as the webhook
   POST did before); and the check alone (``checked_addresses``) for an address and for a name
   the system resolves.

Run: ``.venv/bin/python -m benchmarks.webhook_isolation``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from urllib.parse import urlsplit

import httpx
import psycopg

from benchmarks.services import benchmark_services
from lib.db.pool import close_pools
from lib.egress.client import GuardedSession, shared_ssl_context
from lib.egress.destinations import checked_addresses, system_resolver
from lib.platform.aggregation.sources import GLOBAL_SCOPE
from lib.platform.aggregation.stories import list_aggregated_stories
from lib.platform.alerts.sweep import evaluate_instant_alert_rules_for_all_tenants
from lib.redis.client import close_redis
from lib.settings import get_settings
from tests.support.feeds import FeedServer, rss
from tests.support.outbound import Counting, Trickler
from tests.support.servers import serve_in_thread

TENANTS = 100
POSTS = 300


def seed(database_url: str, feed_url: str, endpoints: list[str]) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE newsroom_profiles, platform_state, alert_history, delivery_logs, webhook_deliveries")
        conn.execute("TRUNCATE webhook_circuits")
        conn.execute(
            "UPDATE source_sets SET feeds = %s::jsonb WHERE key = 'default'", (json.dumps([{"url": feed_url}]),)
        )
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO newsroom_profiles (tenant_scope_id, status, source_set_key)"
                " VALUES (%s, 'completed', 'default')",
                [(f"org_{tenant:04}",) for tenant in range(TENANTS)],
            )
            cursor.executemany(
                "INSERT INTO platform_state (key, value) VALUES (%s, %s::jsonb)",
                [
                    (
                        f"platform:alerts-rules:org_{tenant:04}",
                        json.dumps([{"id": "hook", "keywords": ["frog"], "channel": "webhook", "endpoint": endpoint}]),
                    )
                    for tenant, endpoint in enumerate(endpoints)
                ],
            )


async def sweep(receiver: Counting) -> tuple[float, dict]:
    await list_aggregated_stories(GLOBAL_SCOPE, force_refresh=True)
    started = time.monotonic()
    summary = await evaluate_instant_alert_rules_for_all_tenants()
    last = max(receiver.times) - started
    await close_redis()
    await close_pools()
    return last, summary


def isolation(database_url: str, feed_url: str) -> None:
    answering, silent = Counting(), Trickler(for_s=60, every_s=60)
    with serve_in_thread(answering.app) as good, silent.serving() as dead:
        os.environ["ERMIS_EGRESS_ALLOW"] = ",".join(urlsplit(url).netloc for url in (good, dead, feed_url))
        get_settings.cache_clear()
        results = {}
        for run, first in (("A: all answer", good), ("B: the first never answers", dead)):
            seed(database_url, feed_url, [first, *[good] * (TENANTS - 1)])
            answering.times.clear()
            answering.requests.clear()
            last, summary = asyncio.run(sweep(answering))
            assert len(answering.times) == TENANTS - (run.startswith("B")), summary
            results[run] = last
            print(f"{run}: the other 99 delivered {last * 1000:.0f} ms after the sweep began ({summary})")
        a, b = results.values()
        print(f"ratio B/A: {b / a:.2f}")


async def post_many(client_kind: str, url: str) -> list[float]:
    times = []
    for _ in range(POSTS):
        started = time.perf_counter()
        if client_kind == "guarded":
            async with GuardedSession(timeout_s=5) as session, session.open("POST", url, content=b"{}") as response:
                assert response.status_code == 200
        else:
            # "plain": httpx with the guard's TLS context, so the guard is the only difference;
            # "default": httpx as the bundle used it before, a CA bundle loaded per client.
            verify = shared_ssl_context() if client_kind == "plain" else True
            client = httpx.AsyncClient(timeout=5, verify=verify, trust_env=False)
            async with client, client.stream("POST", url, content=b"{}") as response:
                assert response.status_code == 200
        times.append(time.perf_counter() - started)
    return times


async def check_costs(host: str, port: int) -> tuple[float, float]:
    rounds = 1000
    started = time.perf_counter()
    for _ in range(rounds):
        await checked_addresses(host, port, system_resolver)
    literal = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        await checked_addresses("localhost", port, system_resolver)
    named = (time.perf_counter() - started) / rounds
    return literal, named


def guard_cost() -> None:
    receiver = Counting()
    with serve_in_thread(receiver.app) as url:
        os.environ["ERMIS_EGRESS_ALLOW"] = f"{url.removeprefix('http://')},localhost"
        get_settings.cache_clear()
        asyncio.run(post_many("guarded", f"{url}/warm"))
        default = statistics.median(asyncio.run(post_many("default", f"{url}/hook")))
        plain = statistics.median(asyncio.run(post_many("plain", f"{url}/hook")))
        guarded = statistics.median(asyncio.run(post_many("guarded", f"{url}/hook")))
        literal, named = asyncio.run(check_costs("127.0.0.1", int(url.rsplit(":", 1)[1])))
    print(f"POST with a fresh client, median of {POSTS}: plain {plain * 1000:.2f} ms, guarded {guarded * 1000:.2f} ms")
    print(f"  ratio guarded/plain: {guarded / plain:.2f}")
    print(f"  httpx's default client (a CA bundle loaded per client, as before): {default * 1000:.2f} ms")
    print(f"the check alone: an address {literal * 1e6:.0f} µs, a name resolved by the system {named * 1e6:.0f} µs")


def main() -> None:
    feeds = FeedServer()
    feeds.feeds["frogs"] = rss("Frogs", [("Frog discovered", "https://example.com/frog", "A new frog.")])
    with benchmark_services() as (database_url, _), serve_in_thread(feeds.app) as feed_base:
        feeds.base_url = feed_base
        isolation(database_url, feeds.url("frogs"))
        guard_cost()


if __name__ == "__main__":
    main()
