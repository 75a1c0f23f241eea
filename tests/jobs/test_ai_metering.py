"""lib.jobs.ai_metering against a fake Polar on loopback and the real database: batching with
external ids, poison rows isolated, whole-batch failures, concurrent flushes, and a flush killed
between Polar's accept and the mark."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from lib.jobs.ai_metering import EXTERNAL_ID_PREFIX, flush_ai_metering_outbox
from tests.support.auth import cron_headers, session_headers
from tests.support.fake_polar import TOKEN, FakePolar
from tests.support.functions import client_for, load_api_app
from tests.support.processes import bundle_process, sigkill
from tests.support.reliability import record
from tests.support.servers import serve_in_thread


@pytest.fixture
def polar(set_env) -> Iterator[FakePolar]:
    fake = FakePolar()
    with serve_in_thread(fake.app) as url:
        set_env(POLAR_ACCESS_TOKEN=TOKEN, POLAR_SERVER_URL=url)
        yield fake


async def seed_outbox(db, count: int) -> list[int]:
    cursor = await db.execute(
        "INSERT INTO ai_usage_metering_outbox (event)"
        " SELECT jsonb_build_object('name', 'ai_usage', 'external_customer_id', 'org_' || (n %% 7),"
        "   'metadata', jsonb_build_object('input_tokens', n, 'output_tokens', 2 * n))"
        " FROM generate_series(1, %s) AS n RETURNING id",
        (count,),
    )
    return [row[0] for row in await cursor.fetchall()]


async def statuses(db) -> dict[str, int]:
    cursor = await db.execute("SELECT status, count(*) FROM ai_usage_metering_outbox GROUP BY status")
    return dict(await cursor.fetchall())


async def test_without_polar_it_reports_and_touches_nothing(db, set_env) -> None:
    set_env(POLAR_ACCESS_TOKEN=None)
    await seed_outbox(db, 3)
    assert await flush_ai_metering_outbox() == {
        "processed": 0,
        "failed": 0,
        "skipped": 0,
        "reason": "polar_not_configured",
    }
    assert await statuses(db) == {"pending": 3}


async def test_batches_carry_external_ids_from_row_ids(db, polar: FakePolar) -> None:
    ids = await seed_outbox(db, 250)
    result = await flush_ai_metering_outbox(limit=1000)
    assert result == {"processed": 250, "failed": 0, "skipped": 0, "reason": None}
    assert polar.ingest_counts() == {"events": 250, "requests": 3, "duplicates": 0}
    assert set(polar.events) == {f"{EXTERNAL_ID_PREFIX}{row_id}" for row_id in ids}
    sample = polar.events[f"{EXTERNAL_ID_PREFIX}{ids[0]}"]
    assert sample["name"] == "ai_usage" and sample["metadata"] == {"input_tokens": 1, "output_tokens": 2}
    assert await statuses(db) == {"processed": 250}
    cursor = await db.execute("SELECT count(*) FROM ai_usage_metering_outbox WHERE processed_at IS NULL")
    assert (await cursor.fetchone())[0] == 0


async def test_batch_size_one_is_the_spec_row_at_a_time(db, polar: FakePolar, set_env) -> None:
    set_env(ERMIS_METERING_BATCH_SIZE="1")
    await seed_outbox(db, 5)
    assert (await flush_ai_metering_outbox())["processed"] == 5
    assert polar.ingest_counts()["requests"] == 5


async def test_limit_leaves_the_rest_counted_as_skipped(db, polar: FakePolar) -> None:
    await seed_outbox(db, 30)
    assert await flush_ai_metering_outbox(limit=10) == {"processed": 10, "failed": 0, "skipped": 20, "reason": None}


async def test_a_poison_row_fails_alone_until_it_stops_being_retried(db, polar: FakePolar) -> None:
    ids = await seed_outbox(db, 10)
    poison = ids[3]
    polar.reject_external_ids.add(f"{EXTERNAL_ID_PREFIX}{poison}")
    first = await flush_ai_metering_outbox()
    assert (first["processed"], first["failed"]) == (9, 1)
    for attempt in range(2, 6):
        assert (await flush_ai_metering_outbox())["failed"] == 1, attempt
    requests_before = polar.ingest_counts()["requests"]
    assert await flush_ai_metering_outbox() == {"processed": 0, "failed": 0, "skipped": 0, "reason": None}
    assert polar.ingest_counts()["requests"] == requests_before
    cursor = await db.execute(
        "SELECT status, attempt_count, last_error FROM ai_usage_metering_outbox WHERE id = %s", (poison,)
    )
    status, attempts, last_error = await cursor.fetchone()
    assert (status, attempts) == ("failed", 5)
    assert "422" in last_error
    assert await statuses(db) == {"processed": 9, "failed": 1}


@pytest.mark.reliability
@pytest.mark.parametrize("failure", ["server_error", "rate_limited", "dropped_connection"])
async def test_a_server_or_network_failure_fails_the_whole_batch(db, polar: FakePolar, failure: str) -> None:
    await seed_outbox(db, 7)
    if failure == "server_error":
        polar.server_errors_left = 1
    elif failure == "rate_limited":
        polar.rate_limited_left = 1
    else:
        polar.drops_left = 1
    assert (await flush_ai_metering_outbox())["failed"] == 7
    cursor = await db.execute("SELECT DISTINCT attempt_count, last_error IS NOT NULL FROM ai_usage_metering_outbox")
    assert await cursor.fetchall() == [(1, True)]
    assert (await flush_ai_metering_outbox())["processed"] == 7
    recovered = (await statuses(db)) == {"processed": 7} and polar.ingest_counts()["events"] == 7
    record("faults", f"Polar {failure.replace('_', ' ')} during a flush", injected=1, recovered=int(recovered))
    assert await statuses(db) == {"processed": 7}
    assert polar.ingest_counts()["events"] == 7


async def test_two_flushes_at_once_send_each_row_once(db, polar: FakePolar, set_env) -> None:
    set_env(ERMIS_METERING_BATCH_SIZE="50")
    polar.latency_seconds = 0.01
    await seed_outbox(db, 1000)
    first, second = await asyncio.gather(flush_ai_metering_outbox(limit=1000), flush_ai_metering_outbox(limit=1000))
    assert first["processed"] + second["processed"] == 1000
    assert first["processed"] > 0 and second["processed"] > 0
    assert polar.ingest_counts() == {"events": 1000, "requests": 20, "duplicates": 0}
    assert await statuses(db) == {"processed": 1000}


@pytest.mark.reliability
async def test_a_flush_killed_before_polar_accepted_sends_each_row_once_later(db, polar: FakePolar) -> None:
    await seed_outbox(db, 25)
    polar.latency_seconds = 60  # the request is in flight, not yet accepted
    with bundle_process("flush_ai_metering_outbox()", "lib.jobs.ai_metering") as child:
        assert await asyncio.to_thread(polar.received.wait, 60)  # the child now waits on Polar
        sigkill(child)
    assert polar.ingest_counts()["events"] == 0 and await statuses(db) == {"pending": 25}
    polar.latency_seconds = 0
    assert (await flush_ai_metering_outbox())["processed"] == 25
    billed = polar.ingest_counts()["events"]
    record("kills", "metering flush, before Polar accepted", entries=25, lost=25 - billed, doubled=0)
    assert billed == 25 and polar.ingest_counts()["duplicates"] == 0 and await statuses(db) == {"processed": 25}


@pytest.mark.reliability
async def test_a_flush_killed_after_polar_accepted_resends_without_double_billing(db, polar: FakePolar) -> None:
    await seed_outbox(db, 40)
    polar.pause_after_accept_seconds = 60
    with bundle_process("flush_ai_metering_outbox()", "lib.jobs.ai_metering") as child:
        assert await asyncio.to_thread(polar.accepted.wait, 60)
        sigkill(child)
    assert polar.ingest_counts()["events"] == 40
    assert await statuses(db) == {"pending": 40}  # the mark never landed

    polar.pause_after_accept_seconds = 0
    assert (await flush_ai_metering_outbox())["processed"] == 40
    billed = polar.ingest_counts()["events"]
    record(
        "kills",
        "metering flush, after Polar accepted, before the mark",
        entries=40,
        lost=max(0, 40 - billed),
        doubled=max(0, billed - 40),
    )
    assert polar.ingest_counts() == {"events": 40, "requests": 2, "duplicates": 40}
    assert await statuses(db) == {"processed": 40}


async def test_route_gates_and_body(db, polar: FakePolar, mint_token: Callable[..., str]) -> None:
    await seed_outbox(db, 3)
    app = load_api_app("api/admin/ai/metering/flush.py")
    path = "/api/admin/ai/metering/flush"
    async with client_for(app) as client:
        assert (await client.get(path)).status_code == 401
        ops = session_headers(mint_token(platform_role="ops"))
        assert (await client.post(path, headers=ops)).status_code == 403
        response = await client.get(path, headers=cron_headers())
        assert response.json() == {"processed": 3, "failed": 0, "skipped": 0, "reason": None}
        billing = session_headers(mint_token(platform_role="billing"))
        assert (await client.post(path, headers=billing)).json()["processed"] == 0
