"""Erasure of one person among 100,000 AI ledger retry entries (1 % theirs): the purge's total
time, and the longest any one Redis command ran (the server's own ``SLOWLOG``, every command
logged for the run). Goal: no command over 5 ms — the walk goes in slices
(``lib.platform.ai_ledger_erasure``), where one script over all of it would block Redis for the
length of the walk.

Entries: 90,000 queued, 5,000 on processing, 5,000 dead-lettered; every hundredth is the
person's. The purge runs as the cron runs it (``confirm_data_erasure_request``: walk, Postgres
transaction, verification walk).

Run: ``.venv/bin/python -m benchmarks.erasure_slices``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta

from redis import Redis as SyncRedis

from benchmarks.services import benchmark_services
from lib.db.pool import close_pools
from lib.platform.ai_ledger_retry import DLQ_KEY, PROCESSING_KEY, QUEUE_KEY, dead_letter, retry_entry
from lib.platform.erasure import confirm_data_erasure_request, create_data_erasure_request
from lib.redis.client import close_redis

PERSON = "user_erased"
LISTS = ((QUEUE_KEY, 90_000), (PROCESSING_KEY, 5_000), (DLQ_KEY, 5_000))


def name(entry: dict) -> str:
    return bytes(entry["command"]).split()[0].decode().upper()


def fill(redis: SyncRedis) -> int:
    redis.delete(*(key for key, _ in LISTS))
    theirs, n = 0, 0
    for key, count in LISTS:
        pipe = redis.pipeline(transaction=False)
        for _ in range(count):
            person = PERSON if n % 100 == 0 else f"user_{n}"
            theirs += person == PERSON
            fields = {"id": f"u-{n}", "tenant_scope_id": "org_b", "user_id": person, "model": "m", "input_tokens": n}
            raw = retry_entry(fields)
            pipe.lpush(key, dead_letter(raw, "10 attempts failed") if key == DLQ_KEY else raw)
            n += 1
        pipe.execute()
    return theirs


async def purge() -> tuple[float, dict]:
    request = await create_data_erasure_request(PERSON, timedelta(0))
    started = time.perf_counter()
    purged = await confirm_data_erasure_request(request.id)
    elapsed = time.perf_counter() - started
    await close_redis()
    await close_pools()
    return elapsed, {"status": purged.status, **purged.purge_counts}


def main() -> None:
    with benchmark_services() as (_, redis_url):
        redis = SyncRedis.from_url(redis_url, decode_responses=True)
        theirs = fill(redis)
        redis.config_set("slowlog-log-slower-than", 0)
        redis.config_set("slowlog-max-len", 1_000_000)
        redis.slowlog_reset()
        elapsed, result = asyncio.run(purge())
        log = redis.slowlog_get(1_000_000)
        redis.config_set("slowlog-log-slower-than", 10_000)
        assert result["status"] == "purged" and result["redis:ai-ledger-retry-entries"] == theirs, result
        longest = max(log, key=lambda entry: entry["duration"])
        commands = Counter(name(entry) for entry in log)
        total_us = sum(entry["duration"] for entry in log)
        print(f"{sum(count for _, count in LISTS):,} entries, {theirs:,} the person's: purged in {elapsed:.2f} s")
        print(
            f"Redis commands: {len(log):,} ({dict(commands.most_common())}), {total_us / 1000:.1f} ms of server time;"
            f" longest {longest['duration'] / 1000:.2f} ms ({name(longest)}) — goal <= 5 ms"
        )
        redis.close()


if __name__ == "__main__":
    main()
