"""Webhook deliveries that died: the ``webhook`` source of stuck work (``lib.platform.stuck_work``).

A delivery whose last attempt failed, or whose receiver gave a final answer, is ``dead`` and is
never attempted again on its own (``lib.platform.alerts.webhooks``). Its entry carries the alert
it was sending and every attempt as the tenant saw it (``delivery_logs``: when, the code, why).
**Resend** (redrive) makes it ``pending`` with no attempts counted and wakes it now: the
receiver gets the same ``X-Ermis-Delivery-Id`` as before, and the whole retry schedule again.
**Delete** marks it ``discarded`` — kept for the record, never sent. Each is one conditional
``UPDATE``: of two concurrent requests the second finds the delivery no longer dead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lib.db.pool import connection
from lib.observability import log_server_error
from lib.platform.alerts.webhooks import wake
from lib.platform.stuck_work import EntryOutcome, Outcome, Position, StuckEntry, outcomes_in_order

MAX_ATTEMPTS_SHOWN = 50


class WebhookDeadDeliveries:
    name = "webhook"

    async def list_entries(self, limit: int, before: Position | None) -> list[StuckEntry]:
        params: dict[str, Any] = {"limit": limit}
        after_clause = ""
        if before is not None:
            after_clause = " AND (d.finished_at, d.id) < (%(at)s, %(id)s)"
            params |= {"at": before[0], "id": before[1]}
        async with connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT d.id, d.tenant_scope_id, d.rule_id, d.payload, d.attempts, d.last_detail, d.last_code,"
                    " d.finished_at, COALESCE(a.log, '[]'::jsonb) AS log FROM webhook_deliveries d"
                    " LEFT JOIN LATERAL (SELECT jsonb_agg(jsonb_build_object("
                    " 'at', to_char(l.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),"
                    " 'responseCode', l.response_code, 'detail', l.detail, 'endpoint', l.endpoint)"
                    " ORDER BY l.created_at) AS log FROM (SELECT * FROM delivery_logs WHERE delivery_id = d.id"
                    " ORDER BY created_at DESC LIMIT %(shown)s) l) a ON TRUE"
                    f" WHERE d.status = 'dead'{after_clause}"
                    " ORDER BY d.finished_at DESC, d.id DESC LIMIT %(limit)s",
                    {**params, "shown": MAX_ATTEMPTS_SHOWN},
                )
            ).fetchall()
        return [
            StuckEntry(
                "webhook",
                row["id"],
                row["finished_at"],
                row["attempts"],
                row["last_detail"] or f"HTTP {row['last_code']}",
                {
                    "tenant": row["tenant_scope_id"],
                    "ruleId": row["rule_id"],
                    "alert": row["payload"],
                    "attemptLog": row["log"],
                },
            )
            for row in rows
        ]

    async def _act(self, ids: list[str], assignment: str, outcome: Outcome) -> list[EntryOutcome]:
        async with connection() as conn:
            changed = await (
                await conn.execute(
                    f"UPDATE webhook_deliveries SET {assignment} WHERE id = ANY(%s) AND status = 'dead' RETURNING id",
                    (ids,),
                )
            ).fetchall()
            earlier = await (
                await conn.execute("SELECT id, status FROM webhook_deliveries WHERE id = ANY(%s)", (ids,))
            ).fetchall()
        acted = {row["id"]: EntryOutcome(row["id"], outcome) for row in changed}
        resolutions = {row["id"]: "deleted" if row["status"] == "discarded" else "redriven" for row in earlier}
        return outcomes_in_order(ids, acted, resolutions)

    async def redrive(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        outcomes = await self._act(
            ids, "status = 'pending', attempts = 0, next_attempt_at = now(), finished_at = NULL", "redriven"
        )
        for outcome in outcomes:
            if outcome.outcome == "redriven":
                try:
                    await wake(outcome.id, datetime.now(UTC))
                except Exception as error:  # noqa: BLE001 - pending in Postgres: the sweep's backstop wakes it
                    log_server_error("alerts:webhooks", error, deliveryId=outcome.id)
        return outcomes

    async def delete(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        return await self._act(ids, "status = 'discarded'", "deleted")
