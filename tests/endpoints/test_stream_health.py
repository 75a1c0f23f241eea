"""/api/admin/streams: the change path as the operations console shows it — the bus, the process
holding the detector's lease and since when, the last position, the lag of committed rows without
a position, subscribed processes and open streams per tenant; for the ``queues`` surface only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lib.runtime.process import PROCESS, PROCESS_TAG
from lib.streams.listener import change_listener
from lib.streams.watch import ChangeWatch
from tests.support.auth import session_headers
from tests.support.functions import client_for, load_api_app
from tests.support.listener import SLOW_POLL
from tests.support.servers import serve_in_thread
from tests.support.sse import capture_sse
from tests.support.waiting import eventually

VIEW = load_api_app("api/admin/streams.py")
EVENTS = load_api_app("api/notifications/events.py")


async def alert(db, alert_id: str) -> None:
    await db.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
        " VALUES (%s, 'org_a', 'r', %s, 'info', 'in-app')",
        (alert_id, alert_id),
    )


async def test_the_change_path_without_and_with_a_detector(db, redis, mint_token: Callable[..., str]) -> None:
    ops = session_headers(mint_token(platform_role="ops"))
    async with client_for(VIEW) as client:
        assert (
            await client.get(
                "/api/admin/streams", headers=session_headers(mint_token(org_id="o", org_role="org:member"))
            )
        ).status_code == 403
        await alert(db, "waiting-1")
        await alert(db, "waiting-2")
        await asyncio.sleep(0.2)
        idle = (await client.get("/api/admin/streams", headers=ops)).json()
        assert idle["bus"] == "redis" and idle["detector"] is None  # no stream open: nobody detects
        assert idle["lag"]["unpositioned"] == 2 and idle["lag"]["oldestAgeS"] >= 0.2
        assert idle["subscribedProcesses"] == 0

        with ChangeWatch(SLOW_POLL, (("alerts", "org_a"),)).open():  # a stream: this process subscribes and leads
            listener = change_listener()
            assert await eventually(
                lambda: asyncio.sleep(
                    0, result=listener.detector is not None and listener.detector.leading_since is not None
                ),
                timeout_s=10,
            )
            assert await eventually(lambda: _positioned(client, ops), timeout_s=5)
            busy = (await client.get("/api/admin/streams", headers=ops)).json()
    assert busy["detector"]["process"] == PROCESS and busy["detector"]["tag"] == PROCESS_TAG
    assert busy["detector"]["since"].endswith("Z")
    assert busy["lag"] == {"unpositioned": 0, "oldestAgeS": None}
    assert busy["lastPosition"] >= idle["lastPosition"] + 2 and busy["subscribedProcesses"] == 1


async def _positioned(client, headers: dict[str, str]) -> bool:
    return (await client.get("/api/admin/streams", headers=headers)).json()["lag"]["unpositioned"] == 0


async def test_open_streams_are_counted_per_tenant_from_their_leases(
    db, redis, mint_token: Callable[..., str], set_env
) -> None:
    set_env(ERMIS_SSE_MAX_DURATION_S="5")
    ops = session_headers(mint_token(platform_role="ops"))
    with serve_in_thread(EVENTS) as url:
        streams = [
            asyncio.create_task(
                capture_sse(
                    f"{url}/api/notifications/events",
                    session_headers(mint_token(sub=f"u{n}", org_id=tenant, org_role="org:member")),
                    3.0,
                )
            )
            for n, tenant in enumerate(["org_a", "org_a", "org_b"])
        ]
        await asyncio.sleep(1.0)
        async with client_for(VIEW) as client:
            counted = (await client.get("/api/admin/streams", headers=ops)).json()["openStreamsByTenant"]
        await asyncio.gather(*streams)
    assert counted == {"org_a": 2, "org_b": 1}
