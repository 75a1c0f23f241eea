"""The stream soak at length (issue 36): 60 notification streams on a real ``scripts/serve``
process drop and resume by ``Last-Event-ID`` every 2-10 s for ten minutes while a writer commits
10 alerts a second. Reported: connections made, alerts lost and doubled (over every stream),
and the process's resident memory after a two-minute warm-up and at its highest after it, with
the memory it has mapped for data (resident memory grows only within it), and both by minute.
Before issue 36 it grew by 4-6 KB per ended connection (+21.5 MB in six minutes).

Run: ``.venv/bin/python -m benchmarks.stream_soak`` (about eleven minutes; ``--minutes N``).
The suite runs it shortened (tests/streams/test_soak.py).
"""

from __future__ import annotations

import asyncio
import os

from benchmarks.services import benchmark_services, option_value
from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.local.paths import PROJECT_ROOT
from lib.settings import MAX_STREAM_DURATION_S
from tests.support.fleet import serve_processes
from tests.support.servers import free_port
from tests.support.soak import soak

WARM_UP_S = 120


def main() -> None:
    minutes = float(option_value("--minutes") or 10.0)
    with benchmark_services() as (database_url, _):
        private_pem, public_pem = ensure_dev_key_pair(PROJECT_ROOT / ".data" / "bench-keys")
        os.environ["CLERK_JWT_KEY"] = public_pem
        claims = {"sub": "user_soak", "org_id": "org_soak", "org_role": "org:owner"}
        token = mint_session_token(private_pem, claims, 7200)
        port = free_port()
        with serve_processes(
            [port], ERMIS_STREAMS_PER_USER="100", ERMIS_SSE_MAX_DURATION_S=str(MAX_STREAM_DURATION_S)
        ) as processes:
            result = asyncio.run(
                soak(
                    processes[port].pid,
                    port,
                    database_url,
                    token,
                    streams=60,
                    seconds=minutes * 60,
                    hold_s=(2.0, 10.0),
                    alerts_per_s=10,
                    tenant="org_soak",
                )
            )
    lost, doubled = result.lost_and_doubled()
    warm_up_s = min(WARM_UP_S, minutes * 30)
    warmed, most = result.rss_growth_after(warm_up_s)
    mapped, most_mapped = result.data_growth_after(warm_up_s)
    connections = result.connections()
    print(f"{minutes:.0f} min, 60 streams dropping every 2-10 s, {len(result.written)} alerts written")
    print(f"connections: {connections}; alerts lost: {lost}, doubled: {doubled}")
    print(
        f"resident memory after the warm-up: {warmed / 1e6:.1f} MB; highest after it: {most / 1e6:.1f} MB"
        f" (+{(most - warmed) / 1e6:.2f} MB, {(most - warmed) / max(1, connections):.0f} bytes per connection)"
    )
    print(f"mapped for data after the warm-up: {mapped / 1e6:.1f} MB; highest after it: {most_mapped / 1e6:.1f} MB")
    # The curves, a sample a minute: growth without bound climbs; a plateau (the allocator's
    # arenas, bounded caches) does not. Resident memory only grows within what is mapped.
    by_minute = {int(sample[0] // 60): sample for sample in result.memory}
    for label, column in (("resident memory", 1), ("mapped for data", 2)):
        curve = ", ".join(f"{m}: {sample[column] / 1e6:.1f}" for m, sample in sorted(by_minute.items()))
        print(f"{label} by minute: {curve}")


if __name__ == "__main__":
    main()
