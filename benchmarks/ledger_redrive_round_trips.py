"""Ledger redrive cost: Redis round trips per batch of 100, counted at the server, and entries
drained per second through the Upstash REST path.

5,000 entries are queued, then one redrive drains them in batches of 100 through the Upstash
client, whose every HTTP request to ``scripts/upstash-local``'s server is one round trip (a
counting wrapper around that server tells how many). The same drain through plain redis-py is
measured with ``INFO commandstats`` (commands the server ran per batch). Target: at most 4
round trips per batch.

Run: ``.venv/bin/python -m benchmarks.ledger_redrive_round_trips``.
"""

from __future__ import annotations

import asyncio
import os
import time

from redis import Redis as SyncRedis
from starlette.types import Receive, Scope, Send

from benchmarks.services import benchmark_services
from lib.db.pool import close_pools
from lib.jobs.ai_ledger_redrive import DEFAULT_REDRIVE_BATCH_SIZE, redrive_failed_ai_ledger_entries
from lib.local.upstash_rest import upstash_rest_app
from lib.platform.ai_ledger_retry import QUEUE_KEY, retry_entry
from lib.redis.client import close_redis
from lib.settings import get_settings
from tests.support.servers import serve_in_thread

ENTRIES = 5000
TOKEN = "bench-token"


class CountingApp:
    def __init__(self, app) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.requests += 1
        await self.app(scope, receive, send)


def queue_entries(redis_url: str, offset: int) -> None:
    direct = SyncRedis.from_url(redis_url)
    direct.delete(QUEUE_KEY)
    pipe = direct.pipeline()
    for n in range(ENTRIES):
        fields = {"id": f"bench-{offset + n}", "tenant_scope_id": "org_bench", "user_id": "u", "model": "m"}
        pipe.lpush(QUEUE_KEY, retry_entry({**fields, "input_tokens": n, "output_tokens": n}))
    pipe.execute()
    direct.close()


async def drain() -> tuple[float, dict]:
    started = time.perf_counter()
    result = await redrive_failed_ai_ledger_entries(max_batches=ENTRIES)
    elapsed = time.perf_counter() - started
    await close_redis()
    await close_pools()
    return elapsed, result


def main() -> None:
    with benchmark_services() as (_, redis_url):
        batches = ENTRIES // DEFAULT_REDRIVE_BATCH_SIZE
        counting = CountingApp(upstash_rest_app(redis_url, TOKEN))
        with serve_in_thread(counting) as url:
            queue_entries(redis_url, 0)
            os.environ.update(UPSTASH_REDIS_REST_URL=url, UPSTASH_REDIS_REST_TOKEN=TOKEN)
            get_settings.cache_clear()
            elapsed, result = asyncio.run(drain())
        assert result["succeeded"] == ENTRIES, result
        # One reclaim per run, then claim + acknowledge per batch; the run ends with one empty claim.
        per_batch = counting.requests / batches
        print(
            f"upstash REST: {ENTRIES} entries in {elapsed:.2f} s = {ENTRIES / elapsed:.0f} entries/s;"
            f" {counting.requests} HTTP round trips for {batches} batches = {per_batch:.2f} per batch (target <= 4)"
        )

        for name in ("UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN"):
            os.environ.pop(name)
        get_settings.cache_clear()
        queue_entries(redis_url, ENTRIES)
        direct = SyncRedis.from_url(redis_url)
        direct.config_resetstat()
        elapsed, result = asyncio.run(drain())
        stats = direct.info("commandstats")
        commands = {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}
        direct.close()
        assert result["succeeded"] == ENTRIES, result
        print(
            f"plain redis:  {ENTRIES} entries in {elapsed:.2f} s = {ENTRIES / elapsed:.0f} entries/s;"
            f" server commands: {dict(sorted(commands.items()))}"
        )


if __name__ == "__main__":
    main()
