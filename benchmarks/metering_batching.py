"""Metering flush throughput: batch 100 vs batch 1 (the spec's row at a time), same run.

1,000 outbox rows are flushed to the fake Polar (tests.support.fake_polar) with 20 ms of
latency per request, once with ``ERMIS_METERING_BATCH_SIZE=1`` and once with 100. Reports rows
per second for each and the ratio. Target: batch 100 at least 50x batch 1.

Run: ``.venv/bin/python -m benchmarks.metering_batching``.
"""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

from benchmarks.services import benchmark_services
from lib.db.pool import close_pools
from lib.jobs.ai_metering import flush_ai_metering_outbox
from lib.settings import get_settings
from tests.support.fake_polar import TOKEN, FakePolar
from tests.support.servers import serve_in_thread

ROWS = 1000
LATENCY_SECONDS = 0.020


def seed(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE ai_usage_metering_outbox RESTART IDENTITY")
        conn.execute(
            "INSERT INTO ai_usage_metering_outbox (event)"
            " SELECT jsonb_build_object('name', 'ai_usage', 'external_customer_id', 'org_bench',"
            "   'metadata', jsonb_build_object('input_tokens', n)) FROM generate_series(1, %s) AS n",
            (ROWS,),
        )


async def timed_flush(batch_size: int) -> tuple[float, dict, int]:
    os.environ["ERMIS_METERING_BATCH_SIZE"] = str(batch_size)
    get_settings.cache_clear()
    started = time.perf_counter()
    result = await flush_ai_metering_outbox(limit=ROWS)
    elapsed = time.perf_counter() - started
    await close_pools()
    return elapsed, result, result["processed"]


def main() -> None:
    with benchmark_services() as (database_url, _):
        rates: dict[int, float] = {}
        for batch_size in (1, 100):
            polar = FakePolar(latency_seconds=LATENCY_SECONDS)
            with serve_in_thread(polar.app) as url:
                os.environ.update(POLAR_ACCESS_TOKEN=TOKEN, POLAR_SERVER_URL=url)
                seed(database_url)
                elapsed, result, processed = asyncio.run(timed_flush(batch_size))
                assert processed == ROWS and polar.ingest_counts()["events"] == ROWS, result
                rates[batch_size] = processed / elapsed
                print(
                    f"batch {batch_size:>3}: {processed} rows in {elapsed:.2f} s = {rates[batch_size]:.0f} rows/s"
                    f" ({polar.ingest_counts()['requests']} Polar requests)"
                )
        print(f"ratio batch 100 / batch 1: {rates[100] / rates[1]:.0f}x (target >= 50x)")


if __name__ == "__main__":
    main()
