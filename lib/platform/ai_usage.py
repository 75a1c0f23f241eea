"""AI usage accounting: the producer side of billing (spec: post-response AI usage accounting).

Every AI call reports an ``AiUsage`` with a client-supplied stable ``id``. ``record_ai_usage``
writes, in one statement (so one transaction):

- the ``ai_usage_ledger`` row, ``ON CONFLICT (id) DO NOTHING`` — recording twice counts once;
- the ``ai_usage_metering_outbox`` row holding the Polar event, only for a ledger row that was
  actually inserted — so a duplicate never bills twice.

When Postgres cannot be reached, the entry goes onto the Redis retry queue instead
(``lib.platform.ai_ledger_retry``) and the ledger redrive cron lands it later, through the same
statement (``persist_ai_usage``). If Redis is unavailable too, the entry is reported through
``log_server_error`` with its full content (the person as their ``pseudonym``), the last place
it can be recovered from.

Callers in a request use ``record_ai_usage_after_response`` so accounting never delays the
response.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lib.clock import iso_timestamp, utc_now
from lib.db.pool import DatabaseNotConfigured, connection
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error, pseudonym
from lib.platform.ai_ledger_retry import enqueue_ai_ledger_retry
from lib.platform.erasure import ERASURE_LOCK_CLASS
from lib.runtime.after_response import run_after_response

psycopg = lazy_import("psycopg")
psycopg_pool = lazy_import("psycopg_pool")
psycopg_json = lazy_import("psycopg.types.json")

AI_USAGE_EVENT_NAME = "ai_usage"
# An outbox row is sent to Polar at most this many times (spec: MAX_AI_METERING_ATTEMPTS).
MAX_AI_METERING_ATTEMPTS = 5


class AiUsage(BaseModel):
    """One AI call's usage, as the ledger stores it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    tenant_scope_id: str | None = None
    user_id: str | None = None
    model: str | None = None
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    created_at: datetime = Field(default_factory=utc_now)


def metering_event(usage: AiUsage) -> dict[str, Any]:
    """The Polar event for one usage (without ``external_id``: the flush sets it from the
    outbox row id). The customer is the tenant; no user id leaves for the billing provider."""
    return {
        "name": AI_USAGE_EVENT_NAME,
        "external_customer_id": usage.tenant_scope_id or "platform",
        "timestamp": iso_timestamp(usage.created_at),
        "metadata": {
            "ledger_id": usage.id[:500],
            "model": (usage.model or "unknown")[:500],
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
    }


_PERSIST_SQL = """
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
        id text, tenant_scope_id text, user_id text, model text,
        input_tokens int, output_tokens int, created_at timestamptz, event jsonb)
), inserted AS (
    INSERT INTO ai_usage_ledger (id, tenant_scope_id, user_id, model, input_tokens, output_tokens, created_at)
    SELECT DISTINCT ON (id) id, tenant_scope_id,
        CASE WHEN EXISTS (SELECT 1 FROM data_erasure_requests AS erased
                          WHERE erased.subject_user_id = input.user_id
                            AND erased.status IN ('purged', 'failed'))
             THEN NULL ELSE user_id END,
        model, input_tokens, output_tokens, created_at
    FROM input
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
INSERT INTO ai_usage_metering_outbox (event)
SELECT DISTINCT ON (input.id) input.event FROM input JOIN inserted USING (id)
"""


# Shared by writers, exclusive for the erasure of that person (``lib.platform.erasure``).
_PERSON_LOCK_SQL = "SELECT pg_advisory_xact_lock_shared(%s, hashtext(person)) FROM unnest(%s::text[]) AS person"


async def persist_ai_usage(usages: list[AiUsage]) -> int:
    """Ledger + outbox rows for a batch, in one statement; returns how many were new. A usage
    of a person already erased lands without the person (``user_id`` null); one whose erasure
    commits meanwhile is taken out by it: the statement runs under each person's erasure lock,
    taken shared first (its own statement, so the insert sees an erasure that committed while
    it waited)."""
    if not usages:
        return 0
    rows = [{**usage.model_dump(mode="json"), "event": metering_event(usage)} for usage in usages]
    people = sorted({usage.user_id for usage in usages if usage.user_id is not None})
    async with connection() as conn:  # one transaction: the pool commits as the block ends
        if people:
            await conn.execute(_PERSON_LOCK_SQL, (ERASURE_LOCK_CLASS, people))
        cursor = await conn.execute(_PERSIST_SQL, {"rows": psycopg_json.Jsonb(rows)})
    return cursor.rowcount


# What "Postgres is unreachable" looks like from here: the pool cannot hand out a connection,
# the connection dropped, or no database is configured at all.
POSTGRES_UNAVAILABLE = (psycopg.OperationalError, psycopg_pool.PoolTimeout, DatabaseNotConfigured)


async def record_ai_usage(usage: AiUsage) -> str:
    """Record one usage durably; returns where it went: ``"ledger"`` or ``"retry_queue"``."""
    try:
        await persist_ai_usage([usage])
        return "ledger"
    except POSTGRES_UNAVAILABLE as database_error:
        try:
            await enqueue_ai_ledger_retry(usage.model_dump(mode="json"))
        except Exception as redis_error:
            log_server_error(
                "ai-usage-lost",
                redis_error,
                usage={**usage.model_dump(mode="json"), "user_id": pseudonym(usage.user_id)},
                databaseError=str(database_error),
            )
            raise
        return "retry_queue"


def record_ai_usage_after_response(usage: AiUsage) -> None:
    run_after_response(
        lambda: record_ai_usage(usage),
        on_error=lambda error: log_server_error("ai-usage-accounting", error, usageId=usage.id),
    )
