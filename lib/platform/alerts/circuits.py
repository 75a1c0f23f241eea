"""A circuit per webhook endpoint: a receiver that keeps failing is paused instead of being hit
by every alert.

An endpoint is known by a digest of its URL (``webhook_circuits``; the URL itself can be a
credential and is not stored). Each counted attempt — an answer, or a failure worth retrying —
moves its circuit: a success closes it (the row goes), a failure adds one to its consecutive
failures, and from ``FAILURES_TO_OPEN`` on each failure opens it for
``ERMIS_WEBHOOK_CIRCUIT_OPEN_S`` (60 s), doubled each time it reopens, up to ``MAX_OPEN_S``.
While it is open the deliveries due to it wait for it to close (``webhooks`` postpones them,
uncounted and unsent); the first attempt after that is the probe whose answer closes or reopens
it. A final answer (a 4xx, a refused destination) says nothing about the receiver being up, and
is not counted.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from lib.db.pool import connection
from lib.settings import get_settings

FAILURES_TO_OPEN = 5
MAX_OPEN_S = 3600


def endpoint_digest(endpoint: str) -> str:
    return hashlib.sha256(endpoint.encode()).hexdigest()


async def paused_until(digest: str) -> datetime | None:
    """When the endpoint's open circuit closes, or ``None`` when it is closed."""
    async with connection() as conn:
        row = await (
            await conn.execute(
                "SELECT open_until FROM webhook_circuits WHERE endpoint_digest = %s AND open_until > now()", (digest,)
            )
        ).fetchone()
    return row["open_until"] if row else None


# This failure opens the circuit: the threshold is reached and it is not open already (attempts
# under way when it opened fail too, and must not reopen it for longer).
_OPENS = "c.consecutive_failures + 1 >= %(threshold)s AND (c.open_until IS NULL OR c.open_until <= now())"
_FAILED = f"""
INSERT INTO webhook_circuits AS c (endpoint_digest, consecutive_failures) VALUES (%(digest)s, 1)
ON CONFLICT (endpoint_digest) DO UPDATE SET
    consecutive_failures = c.consecutive_failures + 1,
    opened = c.opened + ({_OPENS})::int,
    open_until = CASE WHEN {_OPENS}
        THEN now() + make_interval(secs => least(%(max)s, %(base)s * 2 ^ c.opened)) ELSE c.open_until END,
    updated_at = now()
"""


async def record(digest: str, *, succeeded: bool, counts: bool = True) -> None:
    """Move the endpoint's circuit by one attempt's outcome (a final answer does not count)."""
    if not counts:
        return
    async with connection() as conn:
        if succeeded:
            await conn.execute("DELETE FROM webhook_circuits WHERE endpoint_digest = %s", (digest,))
        else:
            await conn.execute(
                _FAILED,
                {
                    "digest": digest,
                    "threshold": FAILURES_TO_OPEN,
                    "base": get_settings().ermis_webhook_circuit_open_s,
                    "max": MAX_OPEN_S,
                },
            )
