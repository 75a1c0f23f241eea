"""Per-batch claims: exactly-once effects under at-least-once delivery (issue 10).

Queues deliver at least once, and a captured message can be replayed at the route; checking
"already done?" before running and recording it after lets simultaneous duplicates all run.
So a consumer *claims* its batch in one statement before running it:

- no row, a ``released`` row (an earlier run failed) or a ``running`` row whose lease has
  expired (its instance died) → this delivery owns the batch until ``lease_until`` (the
  queue's visibility timeout) and runs it;
- a ``running`` row still leased → another delivery is running it now: ``held``;
- a ``done`` row → it ran: ``done``, and the delivery is acknowledged without work.

The owner turns the claim into ``done`` on success or ``released`` on failure, matching its
claim token, so a run whose lease expired and was taken over cannot overwrite the new owner.
Claims live in Postgres, next to the work they guard: a Redis outage cannot block or dead-letter
a healthy delivery, and the claim and the work's writes share one database. Done claims are
kept ``DONE_RETENTION_DAYS`` (longer than any queue retention) and then pruned by the state
cleanup cron.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from lib.db.pool import connection

DONE_RETENTION_DAYS = 8

ClaimState = Literal["claimed", "held", "done"]


@dataclass(frozen=True)
class BatchClaim:
    topic: str
    batch_id: str
    state: ClaimState
    token: uuid.UUID | None = None
    lease_until: datetime | None = None


_CLAIM = (
    "INSERT INTO queue_batch_claims (topic, batch_id, status, claim_token, lease_until)"
    " VALUES (%(topic)s, %(batch)s, 'running', %(token)s, now() + make_interval(secs => %(lease)s))"
    " ON CONFLICT (topic, batch_id) DO UPDATE"
    " SET status = 'running', claim_token = EXCLUDED.claim_token, lease_until = EXCLUDED.lease_until,"
    " runs = queue_batch_claims.runs + 1, claimed_at = now(), finished_at = NULL"
    " WHERE queue_batch_claims.status = 'released'"
    " OR (queue_batch_claims.status = 'running' AND queue_batch_claims.lease_until < now())"
    " RETURNING lease_until"
)
_CLAIM_ATTEMPTS = 3


async def claim_batch(topic: str, batch_id: str, lease_seconds: float) -> BatchClaim:
    token = uuid.uuid4()
    async with connection() as conn:
        for _ in range(_CLAIM_ATTEMPTS):
            claimed = await (
                await conn.execute(_CLAIM, {"topic": topic, "batch": batch_id, "token": token, "lease": lease_seconds})
            ).fetchone()
            if claimed is not None:
                return BatchClaim(topic, batch_id, "claimed", token, claimed["lease_until"])
            existing = await (
                await conn.execute(
                    "SELECT status, lease_until, lease_until >= now() AS leased"
                    " FROM queue_batch_claims WHERE topic = %s AND batch_id = %s",
                    (topic, batch_id),
                )
            ).fetchone()
            if existing is not None and existing["status"] == "done":
                return BatchClaim(topic, batch_id, "done")
            if existing is not None and existing["status"] == "running" and existing["leased"]:
                return BatchClaim(topic, batch_id, "held", lease_until=existing["lease_until"])
            # Released or expired between the two statements: claim again.
    return BatchClaim(topic, batch_id, "held")


async def finish_batch(claim: BatchClaim, succeeded: bool) -> None:
    """``done`` on success, ``released`` (claimable again) on failure — only by the owner."""
    async with connection() as conn:
        await conn.execute(
            "UPDATE queue_batch_claims SET status = %s, finished_at = now()"
            " WHERE topic = %s AND batch_id = %s AND claim_token = %s",
            ("done" if succeeded else "released", claim.topic, claim.batch_id, claim.token),
        )


async def prune_done_claims_batch(batch_size: int) -> int:
    async with connection() as conn:
        cursor = await conn.execute(
            "DELETE FROM queue_batch_claims WHERE (topic, batch_id) IN (SELECT topic, batch_id FROM queue_batch_claims"
            " WHERE status = 'done' AND finished_at < now() - make_interval(days => %s) LIMIT %s)",
            (DONE_RETENTION_DAYS, batch_size),
        )
        return cursor.rowcount
