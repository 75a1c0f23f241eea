"""The soak, shortened (the 10-minute one is benchmarks/stream_soak.py): 60 notification streams
on a real ``scripts/serve`` process drop and resume by ``Last-Event-ID`` every 0.5-2 s while a
writer commits 10 alerts a second. Every alert reaches every stream once, and the process's
resident memory stays flat after the warm-up — before, each ended connection left 4-6 KB behind
(a watch and a lease slot in reference cycles that ``scripts/serve``'s rare full collections
left standing), which this many connections would show as megabytes."""

from __future__ import annotations

import pytest

from tests.support.fleet import serve_processes
from tests.support.reliability import record
from tests.support.servers import free_port
from tests.support.soak import soak

SECONDS = 30
WARM_UP_S = 10
GROWTH_LIMIT = 1_000_000  # bytes: a leak of 1 KB per connection would be about 1.4 MB here


@pytest.mark.reliability
async def test_streams_that_drop_and_resume_for_a_while_lose_nothing_and_leave_nothing_behind(
    db, database_url: str, mint_token
) -> None:
    port = free_port()
    token = mint_token(sub="user_soak", org_id="org_soak", org_role="org:owner", ttl_seconds=600)
    with serve_processes([port], ERMIS_STREAMS_PER_USER="100", ERMIS_SSE_MAX_DURATION_S="290") as processes:
        result = await soak(
            processes[port].pid,
            port,
            database_url,
            token,
            streams=60,
            seconds=SECONDS,
            hold_s=(0.5, 2.0),
            alerts_per_s=10,
            tenant="org_soak",
        )
    lost, doubled = result.lost_and_doubled()
    record(
        "faults",
        "stream connections dropped mid-stream and resumed by Last-Event-ID (60 streams, 10 alerts/s)",
        injected=result.connections(),
        recovered=result.connections() if (lost, doubled) == (0, 0) else 0,
    )
    assert result.connections() > 1000 and len(result.written) > 200
    assert (lost, doubled) == (0, 0)
    warmed, most = result.rss_growth_after(WARM_UP_S)
    assert most - warmed < GROWTH_LIMIT, (warmed, most, result.connections())
