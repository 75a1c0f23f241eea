"""lib.queues.claims on the real database: one owner per batch, done is final, a released or
expired claim can be taken again, and only the owner can finish it."""

from __future__ import annotations

import asyncio

import pytest

from lib.queues.claims import claim_batch, finish_batch
from tests.support.reliability import record


@pytest.mark.reliability
async def test_concurrent_claims_have_one_owner(db) -> None:
    claims = await asyncio.gather(*(claim_batch("rss.ingest", "b1", 300) for _ in range(10)))
    owners = sum(claim.state == "claimed" for claim in claims)
    record("duplicates", "10 claims of one batch at once", sent=10, **{"extra runs": owners - 1})
    assert sorted(claim.state for claim in claims) == ["claimed"] + ["held"] * 9
    owner = next(claim for claim in claims if claim.state == "claimed")
    await finish_batch(owner, succeeded=True)
    assert (await claim_batch("rss.ingest", "b1", 300)).state == "done"
    assert (await claim_batch("rss.cluster", "b1", 300)).state == "claimed"  # per topic


async def test_a_failed_run_releases_the_batch_for_the_next_delivery(db) -> None:
    first = await claim_batch("rss.ingest", "b2", 300)
    await finish_batch(first, succeeded=False)
    second = await claim_batch("rss.ingest", "b2", 300)
    assert second.state == "claimed"
    row = await (await db.execute("SELECT runs, status FROM queue_batch_claims WHERE batch_id = 'b2'")).fetchone()
    assert row == (2, "running")


async def test_an_expired_lease_is_taken_over_and_the_old_owner_cannot_finish_it(db) -> None:
    stale = await claim_batch("rss.ingest", "b3", 0.05)
    await asyncio.sleep(0.1)  # the instance died; its lease ran out
    fresh = await claim_batch("rss.ingest", "b3", 300)
    assert fresh.state == "claimed"
    await finish_batch(stale, succeeded=False)  # the old owner wakes up and fails
    assert (await claim_batch("rss.ingest", "b3", 300)).state == "held"
    await finish_batch(fresh, succeeded=True)
    assert (await claim_batch("rss.ingest", "b3", 300)).state == "done"
