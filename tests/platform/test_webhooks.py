"""lib.platform.alerts.webhooks, circuits and dead_deliveries: webhooks retried until delivered
through the SDK's embedded queue (the retry's wake-up is a delayed message), one delivery id on
every attempt, final answers, Retry-After, the circuit, dead deliveries resent from the console,
concurrent wake-ups, and a process SIGKILLed between attempts."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.db.state_store import set_state
from lib.local.paths import PROJECT_ROOT
from lib.local.queue_bridge import PushBridge, queue_triggers
from lib.local.services import free_port
from lib.platform.alerts.evaluation import evaluate_alert_rules
from lib.platform.alerts.rules import get_alert_rules, rules_key
from lib.platform.alerts.webhooks import run_attempt
from tests.support.auth import session_headers
from tests.support.env import allow_egress
from tests.support.fleet import start_serve_process
from tests.support.functions import client_for, load_api_app
from tests.support.outbound import Counting
from tests.support.queue import EmbeddedQueue, embedded_queue
from tests.support.reliability import record
from tests.support.servers import serve_in_thread
from tests.support.waiting import eventually

DELIVER = load_api_app("api/queues/webhooks/deliver.py")
DEAD_LETTERS = load_api_app("api/admin/dead-letters.py")
CONSUMER = "api_Squeues_Swebhooks_Sdeliver_Dpy"
FROG = [{"id": "s-frog", "headline": "Frog discovered", "summary": "A new frog."}]


@pytest.fixture
def queue(set_env, redis) -> Iterator[EmbeddedQueue]:
    set_env(ERMIS_QUEUE_SIGNING_SECRET="webhook-test-secret")
    with embedded_queue(set_env) as embedded:
        yield embedded


@pytest.fixture
def receiver(set_env) -> Iterator[Counting]:
    counting = Counting()
    with serve_in_thread(counting.app) as url:
        allow_egress(set_env, url)
        counting.url = f"{url}/hooks/T000/SECRET?k=1"  # type: ignore[attr-defined]
        yield counting


async def fire(tenant: str, endpoint: str, stories: list[dict] = FROG) -> int:
    """Store the tenant's webhook rule and evaluate it, as the sweep does."""
    await set_state(
        rules_key(tenant), [{"id": "hook", "keywords": ["frog"], "channel": "webhook", "endpoint": endpoint}]
    )
    return await evaluate_alert_rules(tenant, stories, await get_alert_rules(tenant))


async def pump(queue: EmbeddedQueue, done: Callable[[], bool], rounds: int = 40) -> None:
    """Vercel's push, on the queue's clock and the real one: each round lets real time pass (the
    schedule is in Postgres), moves the queue's clock a second and pushes what is visible."""
    for _ in range(rounds):
        if done():
            return
        await asyncio.sleep(0.3)
        queue.advance(1)
        await queue.push("webhooks-deliver", DELIVER, "/api/queues/webhooks/deliver", CONSUMER)
    assert done()


async def attempts_logged(db) -> list[tuple]:
    rows = await (
        await db.execute("SELECT response_code, status, endpoint FROM delivery_logs ORDER BY created_at")
    ).fetchall()
    return [tuple(row) for row in rows]


async def delivery(db) -> tuple:
    return tuple(await (await db.execute("SELECT status, attempts FROM webhook_deliveries")).fetchone())


async def delivered(db) -> bool:
    return (await delivery(db))[0] == "delivered"


async def test_a_receiver_that_fails_twice_gets_the_alert_on_the_third_attempt(
    db, set_env, queue: EmbeddedQueue, receiver: Counting
) -> None:
    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="0.3,0.3,0.3")
    receiver.statuses = [500, 503, 200]
    assert await fire("org_a", receiver.url) == 1
    await pump(queue, lambda: receiver.count == 3)
    await asyncio.sleep(0.3)
    assert receiver.count == 3  # nothing after the 200
    ids = {headers["x-ermis-delivery-id"] for headers in receiver.requests}
    [alert_id] = [row[0] for row in await (await db.execute("SELECT id FROM alert_history")).fetchall()]
    assert ids == {alert_id}
    shown = receiver.url.split("/hooks")[0] + "/…"
    assert await attempts_logged(db) == [(500, "failed", shown), (503, "failed", shown), (200, "delivered", shown)]
    assert await delivery(db) == ("delivered", 3)


async def test_a_receiver_that_always_fails_ends_dead_listed_and_is_resent_from_the_console(
    db, set_env, queue: EmbeddedQueue, receiver: Counting, mint_token: Callable[..., str]
) -> None:
    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="0.3,0.3")
    receiver.statuses = [500]
    await fire("org_a", receiver.url)
    await pump(queue, lambda: receiver.count == 3)
    assert await delivery(db) == ("dead", 3)
    operator = session_headers(mint_token(platform_role="super_admin", sub="user_ops"))
    async with client_for(DEAD_LETTERS) as client:
        listed = (await client.get("/api/admin/dead-letters?source=webhook", headers=operator)).json()
        [entry] = listed["entries"]
        assert (entry["source"], entry["attempts"]) == ("webhook", 3)
        assert [attempt["responseCode"] for attempt in entry["payload"]["attemptLog"]] == [500, 500, 500]
        assert "SECRET" not in str(entry)  # the endpoint is shown as scheme://host/… here too
        receiver.statuses = [500, 500, 500, 200]
        resent = await client.post(
            "/api/admin/dead-letters",
            json={"action": "redrive", "source": "webhook", "ids": [entry["id"]]},
            headers=operator,
        )
        assert resent.json().get("results") == [{"id": entry["id"], "outcome": "redriven"}]
        again = await client.post(
            "/api/admin/dead-letters",
            json={"action": "redrive", "source": "webhook", "ids": [entry["id"]]},
            headers=operator,
        )
        assert again.json()["results"] == [{"id": entry["id"], "outcome": "already_redriven"}]
    await pump(queue, lambda: receiver.count == 4)
    assert await delivery(db) == ("delivered", 1)
    assert {headers["x-ermis-delivery-id"] for headers in receiver.requests} == {entry["id"]}
    audit = await (await db.execute("SELECT actor, action, source FROM ops_audit_log")).fetchall()
    assert [tuple(row) for row in audit] == [("user_ops", "redrive", "webhook"), ("user_ops", "redrive", "webhook")]


@pytest.mark.parametrize("status", [400, 401, 404, 410, 422])
async def test_a_4xx_other_than_408_and_429_is_final(db, receiver: Counting, status: int) -> None:
    receiver.statuses = [status]
    await fire("org_a", receiver.url)
    assert await delivery(db) == ("dead", 1)


async def test_a_429_is_retried_no_sooner_than_its_retry_after(db, set_env, receiver: Counting) -> None:
    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="1")
    receiver.statuses, receiver.headers = [429], {"Retry-After": "120"}
    await fire("org_a", receiver.url)
    row = await (await db.execute("SELECT status, next_attempt_at - now() AS wait FROM webhook_deliveries")).fetchone()
    assert row[0] == "pending" and row[1].total_seconds() > 110


async def test_an_endpoint_that_keeps_failing_is_paused_and_costs_nothing(db, set_env, receiver: Counting) -> None:
    """Five failures open the circuit: the sixth and seventh alerts to the endpoint wait for it
    to close, unsent and uncounted."""
    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="3600", ERMIS_WEBHOOK_CIRCUIT_OPEN_S="600")
    receiver.statuses = [503]
    stories = [{"id": f"s{index}", "headline": f"Frog {index}"} for index in range(7)]
    assert await fire("org_a", receiver.url, stories) == 7
    assert receiver.count == 5
    rows = await (
        await db.execute("SELECT attempts, next_attempt_at - now() AS wait FROM webhook_deliveries ORDER BY attempts")
    ).fetchall()
    assert [row[0] for row in rows] == [0, 0, 1, 1, 1, 1, 1]
    assert all(row[1].total_seconds() > 500 for row in rows[:2])  # waiting for the circuit, not retried now


@pytest.mark.reliability
async def test_concurrent_wakeups_make_one_attempt(db, set_env, receiver: Counting) -> None:
    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="0.2")
    receiver.statuses = [500, 200]
    await fire("org_a", receiver.url)
    [delivery_id] = [row[0] for row in await (await db.execute("SELECT id FROM webhook_deliveries")).fetchall()]
    await asyncio.sleep(0.3)
    await asyncio.gather(*(run_attempt(delivery_id) for _ in range(10)))
    record(
        "duplicates", "10 webhook wake-ups of one due attempt at once", sent=10, **{"extra runs": receiver.count - 2}
    )
    assert receiver.count == 2
    assert await delivery(db) == ("delivered", 2)


async def test_a_receiver_down_for_a_while_gets_every_alert(
    db, set_env, queue: EmbeddedQueue, receiver: Counting
) -> None:
    """The receiver answers 503 to everything for 3 s (its outage, ten minutes compressed): every
    alert fired during it is delivered once, the circuit having paused the endpoint meanwhile."""
    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="0.3,0.5,1,1,1,1,1,1", ERMIS_WEBHOOK_CIRCUIT_OPEN_S="1")
    receiver.down_until = time.monotonic() + 3
    stories = [{"id": f"s{index}", "headline": f"Frog {index}"} for index in range(8)]
    assert await fire("org_a", receiver.url, stories) == 8

    async def delivered() -> int:
        query = "SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'"
        return (await (await db.execute(query)).fetchone())[0]

    for _ in range(60):
        if await delivered() == 8:
            break
        await asyncio.sleep(0.3)
        queue.advance(1)
        await queue.push("webhooks-deliver", DELIVER, "/api/queues/webhooks/deliver", CONSUMER)
    assert await delivered() == 8
    ids = [
        headers["x-ermis-delivery-id"]
        for headers, status in zip(receiver.requests, receiver.answered, strict=True)
        if status == 200
    ]
    assert len(ids) == len(set(ids)) == 8  # each alert delivered, none twice
    assert receiver.answered.count(503) < 5 + 8  # the circuit held attempts back during the outage


@pytest.mark.reliability
async def test_a_retry_survives_the_sigkill_of_the_process_that_scheduled_it(
    db, set_env, receiver: Counting, database_url: str, redis_url: str
) -> None:
    """The consumer runs in ``scripts/serve``'s process behind the embedded queue service (real
    clock) and Vercel's push: that process makes the second attempt, schedules the third and is
    SIGKILLed; a new process on the same port gets the third wake-up and delivers."""
    from vercel.queue.devserver import embedded_queue_dev_server

    set_env(ERMIS_QUEUE_SIGNING_SECRET="webhook-test-secret", ERMIS_WEBHOOK_RETRY_SCHEDULE_S="1,3")
    receiver.statuses = [500, 500, 200]
    port = free_port()
    with embedded_queue_dev_server(manual_clock=False) as service:
        set_env(VERCEL_QUEUE_BASE_URL=service.base_url, VERCEL_QUEUE_API_TOKEN="local-token", VERCEL_REGION="iad1")

        def start() -> subprocess.Popen:
            return start_serve_process(port, DATABASE_URL=database_url, REDIS_URL=redis_url)

        triggers = [trigger for trigger in queue_triggers(PROJECT_ROOT) if trigger.topic == "webhooks-deliver"]
        bridge = PushBridge(service, f"http://127.0.0.1:{port}", triggers, lambda _line: None)
        stop = asyncio.Event()
        first = start()
        pushing = asyncio.create_task(bridge.run(stop))
        try:
            assert await fire("org_a", receiver.url) == 1  # attempt 1, here: 500
            wakeups = lambda: len(service.state.by_topic.get("webhooks-deliver", []))  # noqa: E731
            assert await eventually(lambda: asyncio.sleep(0, result=receiver.count == 2 and wakeups() == 2), 30)
            first.kill()  # attempt 2 made and attempt 3 scheduled by this process
            first.wait(timeout=10)
            second = start()
            try:
                assert await eventually(lambda: delivered(db), 30)  # the third attempt, recorded
            finally:
                second.kill()
                second.wait(timeout=10)
        finally:
            stop.set()
            await pushing
    statuses = [row[0] for row in await (await db.execute("SELECT status FROM webhook_deliveries")).fetchall()]
    record(
        "kills",
        "webhook retry, the process that scheduled it",
        entries=1,
        lost=int(statuses != ["delivered"]),
        doubled=max(0, receiver.answered.count(200) - 1),
    )
    assert statuses == ["delivered"]
    assert len({headers["x-ermis-delivery-id"] for headers in receiver.requests}) == 1
    assert (await (await db.execute("SELECT count(*) FROM alert_history")).fetchone())[0] == 1


async def test_without_a_queue_the_sweep_runs_the_retries_that_are_due(db, redis, set_env, receiver: Counting) -> None:
    """No queue configured (local development without one): a retry's wake-up cannot be sent, so
    the alert sweep's backstop attempts every delivery that is due."""
    from lib.platform.alerts.sweep import evaluate_instant_alert_rules_for_all_tenants

    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="0.2")
    receiver.statuses = [500, 200]
    await fire("org_a", receiver.url)
    assert receiver.count == 1
    await asyncio.sleep(0.3)
    summary = await evaluate_instant_alert_rules_for_all_tenants()
    assert summary["webhookRetriesWoken"] == 1
    assert receiver.count == 2 and await delivery(db) == ("delivered", 2)


async def test_with_a_queue_the_sweep_wakes_a_delivery_whose_wakeup_was_lost(
    db, redis, set_env, queue: EmbeddedQueue, receiver: Counting
) -> None:
    from lib.platform.alerts.sweep import evaluate_instant_alert_rules_for_all_tenants
    from lib.platform.alerts.webhooks import BACKSTOP_GRACE_S

    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="0.2")
    receiver.statuses = [500, 200]
    await fire("org_a", receiver.url)
    queue.server.state.by_topic.clear()  # the wake-up is lost (a publish that failed)
    await db.execute(
        f"UPDATE webhook_deliveries SET next_attempt_at = now() - interval '{BACKSTOP_GRACE_S + 1} seconds'"
    )
    assert (await evaluate_instant_alert_rules_for_all_tenants())["webhookRetriesWoken"] == 1
    await pump(queue, lambda: receiver.count == 2)
    assert await delivery(db) == ("delivered", 2)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    answers=st.lists(st.sampled_from([200, 204, 404, 408, 429, 500, 503]), min_size=1, max_size=6),
    wakeups=st.lists(st.integers(1, 4), min_size=6, max_size=6),
)
async def test_any_answers_and_any_number_of_simultaneous_wakeups_keep_the_books(
    db, set_env, receiver: Counting, answers: list[int], wakeups: list[int]
) -> None:
    """Whatever the receiver answers, and however many wake-ups arrive at once each round: one
    attempt per round at most, one logged row per request, never a request after a 2xx or a
    final answer, and the delivery ends delivered exactly when a 2xx came."""
    await db.execute("TRUNCATE webhook_deliveries, webhook_circuits, delivery_logs, alert_history, platform_state")
    set_env(ERMIS_WEBHOOK_RETRY_SCHEDULE_S="0.05,0.05,0.05,0.05,0.05")
    receiver.statuses, receiver.requests[:], receiver.answered[:] = answers, [], []
    await fire("org_a", receiver.url)
    [delivery_id] = [row[0] for row in await (await db.execute("SELECT id FROM webhook_deliveries")).fetchall()]
    for simultaneous in wakeups:
        await asyncio.sleep(0.07)
        before = receiver.count
        await asyncio.gather(*(run_attempt(delivery_id) for _ in range(simultaneous)))
        assert receiver.count - before <= 1
    status, attempts = await delivery(db)
    answered = receiver.answered
    settled = next((i for i, code in enumerate(answered) if code < 300 or code in (404,)), None)
    assert settled is None or settled == len(answered) - 1  # nothing was sent after a 2xx or a final answer
    assert attempts == len(answered) == len(await attempts_logged(db))
    assert (status == "delivered") == any(code < 300 for code in answered)
    if status == "pending":
        assert len(answered) < 6 and all(code in (408, 429, 500, 503) for code in answered)
