"""lib.jobs.run_leases through the cron routes: a cron fired twice at once, or while a long run
is going (scheduled or by an operator), runs once; the duplicate answers 200 already_running;
a lease left by a dead run lapses; each run releases its lease."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from lib.jobs.schedule import load_crons
from lib.local.paths import PROJECT_ROOT
from lib.local.routing import discover_routes, resolve
from tests.support.auth import cron_headers, session_headers
from tests.support.fake_polar import TOKEN, FakePolar
from tests.support.functions import client_for, load_api_app
from tests.support.reliability import record
from tests.support.servers import serve_in_thread

METERING = load_api_app("api/admin/ai/metering/flush.py")
PATH = "/api/admin/ai/metering/flush"


@pytest.fixture
def polar(set_env) -> Iterator[FakePolar]:
    fake = FakePolar(latency_seconds=0.3)
    with serve_in_thread(fake.app) as url:
        set_env(POLAR_ACCESS_TOKEN=TOKEN, POLAR_SERVER_URL=url, ERMIS_METERING_BATCH_SIZE="10")
        yield fake


async def seed_outbox(db, count: int) -> None:
    await db.execute(
        "INSERT INTO ai_usage_metering_outbox (event) SELECT jsonb_build_object('name', 'ai_usage',"
        " 'external_customer_id', 'org_a', 'metadata', jsonb_build_object('n', n)) FROM generate_series(1, %s) n",
        (count,),
    )


@pytest.mark.reliability
async def test_a_cron_fired_twice_at_once_runs_once(db, polar: FakePolar) -> None:
    await seed_outbox(db, 30)
    async with client_for(METERING) as client:
        first, second = await asyncio.gather(
            client.get(PATH, headers=cron_headers()), client.get(PATH, headers=cron_headers())
        )
    # The run's answer counts its own skipped rows too: the duplicate is the one that says why.
    bodies = sorted((first.json(), second.json()), key=lambda body: body.get("skipped") == "already_running")
    counts = polar.ingest_counts()
    doubled = counts["duplicates"] + max(0, counts["events"] - 30)
    record("crons", "metering flush GET twice at once", fired=2, **{"doubled effects": doubled})
    assert first.status_code == second.status_code == 200
    assert bodies[0]["processed"] == 30
    assert bodies[1]["skipped"] == "already_running" and bodies[1]["job"] == "ai-metering-flush"
    assert bodies[1]["trigger"] == "schedule" and bodies[1]["runningSince"].endswith("Z")
    assert polar.ingest_counts() == {"events": 30, "requests": 3, "duplicates": 0}


@pytest.mark.reliability
async def test_an_operator_post_during_the_scheduled_run_does_nothing(
    db, polar: FakePolar, mint_token: Callable[..., str]
) -> None:
    await seed_outbox(db, 20)
    billing = session_headers(mint_token(platform_role="billing"))
    async with client_for(METERING) as client:
        scheduled = asyncio.create_task(client.get(PATH, headers=cron_headers()))
        await asyncio.sleep(0.1)
        operator = await client.post(PATH, headers=billing)
        assert (await scheduled).json()["processed"] == 20
    counts = polar.ingest_counts()
    doubled = counts["duplicates"] + max(0, counts["events"] - 20)
    record("crons", "operator POST during the scheduled run", fired=2, **{"doubled effects": doubled})
    assert operator.status_code == 200 and operator.json()["skipped"] == "already_running"
    assert polar.ingest_counts()["duplicates"] == 0 and polar.ingest_counts()["events"] == 20


async def test_the_lease_is_released_after_a_run_and_a_dead_runs_lease_lapses(db, polar: FakePolar) -> None:
    await seed_outbox(db, 5)
    async with client_for(METERING) as client:
        assert (await client.get(PATH, headers=cron_headers())).json()["processed"] == 5
        assert (await client.get(PATH, headers=cron_headers())).json()["processed"] == 0  # ran: not skipped
        await db.execute(
            "INSERT INTO cron_run_leases (job, holder, trigger, lease_until)"
            " VALUES ('ai-metering-flush', gen_random_uuid(), 'schedule', now() + interval '1 minute')"
        )
        assert (await client.get(PATH, headers=cron_headers())).json()["skipped"] == "already_running"
        await db.execute("UPDATE cron_run_leases SET lease_until = now() - interval '1 second'")  # its run died
        await seed_outbox(db, 2)
        assert (await client.get(PATH, headers=cron_headers())).json()["processed"] == 2
    leases = await (await db.execute("SELECT count(*) FROM cron_run_leases")).fetchone()
    assert leases == (0,)


@pytest.mark.reliability
@pytest.mark.parametrize("cron", load_crons(), ids=lambda cron: cron.name)
async def test_every_cron_fired_while_its_job_runs_does_nothing(db, cron) -> None:
    await db.execute(
        "INSERT INTO cron_run_leases (job, holder, trigger, lease_until)"
        " VALUES (%s, gen_random_uuid(), 'schedule', now() + interval '1 minute')",
        (cron.name,),
    )
    found = resolve(discover_routes(PROJECT_ROOT), cron.path)
    async with client_for(load_api_app(found[0].file)) as client:
        response = await client.get(cron.path, headers=cron_headers())
    body = response.json()
    ran = body.get("skipped") != "already_running"
    record("crons", f"{cron.name} fired while a run of it is going", fired=2, **{"doubled effects": int(ran)})
    assert response.status_code == 200 and body["job"] == cron.name and not ran
