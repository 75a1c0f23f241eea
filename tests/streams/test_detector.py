"""lib.streams.detector and bus against real Redis, Postgres and ``scripts/serve`` processes:
candidates started at the same instant make one leader; two stream processes behind one address
lose and double nothing for npm's ``eventsource`` while eight writers race and the leader is
killed with SIGKILL, then stopped with SIGTERM — another takes over within the stated time, and
every position is given once (that positions only increase per channel under racing writers and
two positioners is tests/streams/test_positioner's)."""

from __future__ import annotations

import asyncio
import random
import signal
import time

import pytest

from lib.settings import get_settings
from lib.streams.bus import RedisBus
from lib.streams.detector import RETRY_S, ChangeDetector
from lib.streams.positioner import positioned_now
from tests.support.eventsource_race import eventsource_client, race_alerts_and_notifications
from tests.support.fleet import lease_holder, round_robin, serve_processes, start_serve_process
from tests.support.reliability import record
from tests.support.servers import free_port
from tests.support.waiting import eventually


async def test_candidates_started_at_the_same_instant_make_one_leader(db, redis_url: str) -> None:
    epoch = (await (await db.execute("SELECT epoch FROM stream_log_epoch")).fetchone())[0]
    buses = [RedisBus(redis_url, epoch) for _ in range(4)]
    detectors = [ChangeDetector(bus) for bus in buses]
    running = True
    tasks = [asyncio.create_task(detector.run(lambda: running)) for detector in detectors]
    try:
        await asyncio.sleep(2 * RETRY_S)
        leaders = [detector for detector in detectors if detector.leading_since is not None]
        assert len(leaders) == 1
        assert (await buses[0].leader())["since"] == pytest.approx(leaders[0].leading_since, abs=1)
        running = False
        await asyncio.gather(*tasks)
        assert await buses[0].leader() is None  # the leader let go as it stopped
    finally:
        for task in tasks:
            task.cancel()
        for bus in buses:
            await bus.close()


RACE_SECONDS = 24


@pytest.mark.reliability
async def test_two_processes_behind_one_address_lose_and_double_nothing_while_the_leader_is_killed(
    db, database_url: str, redis_url: str, mint_token
) -> None:
    """npm's ``eventsource`` through one address that alternates between two ``scripts/serve``
    processes, its connections cut at random and its streams self-closing every 7 s, so it
    resumes by ``Last-Event-ID`` on either process; eight writers race. A third of the way in
    the leader is SIGKILLed (and a new process started on its port), two thirds in the leader
    is stopped with SIGTERM (and replaced too)."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    lease_s = get_settings().ermis_stream_detector_lease_s
    ports = [free_port(), free_port()]
    token = mint_token(sub="user_fleet", org_id="org_fleet", org_role="org:member", ttl_seconds=600)
    takeovers: dict[str, float] = {}
    committed: set[str] = set()
    with serve_processes(ports, ERMIS_SSE_MAX_DURATION_S="7") as processes:

        async def leader() -> int | None:
            return await lease_holder(redis_url, database_url)

        async def replace_leader(how: signal.Signals) -> None:
            assert await eventually(lambda: _is_one_of(leader(), processes), timeout_s=15)
            pid = await leader()
            port = next(port for port, process in processes.items() if process.pid == pid)
            stopped_at = time.monotonic()
            processes[port].send_signal(how)
            processes[port].wait(timeout=30)
            assert await eventually(lambda: _led_by_other_than(leader(), pid), timeout_s=lease_s + 10)
            takeovers[how.name] = time.monotonic() - stopped_at
            processes[port] = await asyncio.to_thread(start_serve_process, port, ERMIS_SSE_MAX_DURATION_S="7")

        async def faults() -> None:
            await asyncio.sleep(RACE_SECONDS / 3)
            await replace_leader(signal.SIGKILL)
            await asyncio.sleep(RACE_SECONDS / 3)
            await replace_leader(signal.SIGTERM)

        async with round_robin(ports) as address:
            with eventsource_client(f"http://127.0.0.1:{address}/api/notifications/events", token) as run:
                assert await eventually(lambda: asyncio.sleep(0, result=bool(run.lines)), timeout_s=15), "no connection"
                await asyncio.sleep(0.5)  # its first connection is open: what follows is news
                until = time.monotonic() + RACE_SECONDS
                await asyncio.gather(
                    faults(),
                    *(
                        race_alerts_and_notifications(
                            database_url, rng, until, committed, "org_fleet", "user_fleet", writer
                        )
                        for writer in range(8)
                    ),
                )
                await eventually(lambda: asyncio.sleep(0, result=set(run.delivered()) >= committed), timeout_s=60)
    got = run.delivered()
    record(
        "kills",
        "change detector SIGKILLed, then its successor SIGTERMed, under 8 racing writers (two stream processes)",
        entries=len(committed),
        lost=len(committed - set(got)),
        doubled=len(got) - len(set(got)),
    )
    assert [line for line in run.events() if line["event"] == "stream.reset" or line["initial"]] == [], seed
    assert sorted(got) == sorted(committed), (seed, len(committed))
    # Killed: the lease expires, a candidate takes it at its next try. Stopped: handed over at once.
    assert takeovers["SIGKILL"] <= lease_s + RETRY_S + 1.0, takeovers
    assert takeovers["SIGTERM"] <= 1.5, takeovers
    await positioned_now()
    given = await (
        await db.execute("SELECT count(*), count(DISTINCT position), count(position) FROM stream_changes")
    ).fetchone()
    assert given[0] == given[1] == given[2]  # every row positioned, no position given twice


async def _is_one_of(leader: asyncio.Future, processes: dict) -> bool:
    return await leader in {process.pid for process in processes.values()}


async def _led_by_other_than(leader: asyncio.Future, pid: int) -> bool:
    holder = await leader
    return holder is not None and holder != pid
