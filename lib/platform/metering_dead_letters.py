"""Metering outbox rows that exhausted their attempts: the ``metering`` source of stuck work
(``lib.platform.stuck_work``).

A row the metering flush failed ``MAX_AI_METERING_ATTEMPTS`` times stays ``failed`` and is never
sent again on its own. **Redrive** resets it to ``pending`` with no attempts, so the next flush
sends it (with the same ``external_id``, so Polar still drops a duplicate); **delete** marks it
``discarded`` — kept for the record, never sent. Each is one conditional ``UPDATE``: of two
concurrent requests the second finds the row no longer exhausted and reports what happened.
"""

from __future__ import annotations

from typing import Any

from lib.db.pool import connection
from lib.lazy_imports import lazy_import
from lib.platform.stuck_work import EntryOutcome, Outcome, Position, StuckEntry, outcomes_in_order, row_ids

ai_usage = lazy_import("lib.platform.ai_usage")

_EXHAUSTED = "status = 'failed' AND attempt_count >= %(max_attempts)s"
_FAILED_AT = "COALESCE(last_attempt_at, created_at)"


class MeteringDeadLetters:
    name = "metering"

    async def list_entries(self, limit: int, before: Position | None) -> list[StuckEntry]:
        params: dict[str, Any] = {"max_attempts": ai_usage.MAX_AI_METERING_ATTEMPTS, "limit": limit}
        after_clause = ""
        if before is not None and before[1].isdigit():
            after_clause = f" AND ({_FAILED_AT}, id) < (%(at)s, %(id)s)"
            params |= {"at": before[0], "id": int(before[1])}
        async with connection() as conn:
            rows = await (
                await conn.execute(
                    f"SELECT id, event, attempt_count, last_error, {_FAILED_AT} AS failed_at"
                    f" FROM ai_usage_metering_outbox WHERE {_EXHAUSTED}{after_clause}"
                    f" ORDER BY {_FAILED_AT} DESC, id DESC LIMIT %(limit)s",
                    params,
                )
            ).fetchall()
        return [
            StuckEntry(
                "metering", str(row["id"]), row["failed_at"], row["attempt_count"], row["last_error"], row["event"]
            )
            for row in rows
        ]

    async def _act(self, ids: list[str], assignment: str, outcome: Outcome) -> list[EntryOutcome]:
        async with connection() as conn:
            changed = await (
                await conn.execute(
                    f"UPDATE ai_usage_metering_outbox SET {assignment}"
                    f" WHERE id = ANY(%(ids)s) AND {_EXHAUSTED} RETURNING id",
                    {"ids": row_ids(ids), "max_attempts": ai_usage.MAX_AI_METERING_ATTEMPTS},
                )
            ).fetchall()
            earlier = await (
                await conn.execute(
                    "SELECT id, status FROM ai_usage_metering_outbox WHERE id = ANY(%s)", (row_ids(ids),)
                )
            ).fetchall()
        acted = {str(row["id"]): EntryOutcome(str(row["id"]), outcome) for row in changed}
        resolutions = {str(row["id"]): "deleted" if row["status"] == "discarded" else "redriven" for row in earlier}
        return outcomes_in_order(ids, acted, resolutions)

    async def redrive(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        return await self._act(ids, "status = 'pending', attempt_count = 0, last_error = NULL", "redriven")

    async def delete(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        return await self._act(ids, "status = 'discarded'", "deleted")
