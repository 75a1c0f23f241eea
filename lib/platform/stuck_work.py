"""Stuck work (issue 11): one model for the places work stops and waits for an operator.

- ``queue``: a queue message dead-lettered after its last delivery failed
  (``lib.queues.dead_letters``);
- ``ledger``: an AI ledger entry on the Redis retry DLQ (``lib.platform.ai_ledger_retry``);
- ``metering``: a metering outbox row that exhausted its attempts (``lib.platform.ai_usage``);
- ``webhook``: a webhook delivery that died (``lib.platform.alerts.dead_deliveries``).

Each source lists its entries newest first, by the keyset ``(failedAt, id)`` (a ``Position``),
and acts on entries by id: **redrive** (the work goes back to where it is retried) and
**delete** (it is given up on, with a reason). An action is applied to each entry at most once,
even under concurrent requests: each source claims an entry atomically (a row lock, a Redis
``LREM``), and an entry already acted on is reported per id (``already_redriven``,
``already_deleted``, ``not_found``) instead of being acted on again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from lib.clock import iso_timestamp

Action = Literal["redrive", "delete"]
Outcome = Literal["redriven", "deleted", "already_redriven", "already_deleted", "not_found", "not_redrivable", "failed"]
Position = tuple[datetime, str]
"""Where a page ended: the last entry's ``(failedAt, id)``; the next page is strictly older."""


@dataclass(frozen=True)
class StuckEntry:
    source: str
    id: str
    failed_at: datetime
    attempts: int | None
    error: str | None
    payload: Any

    @property
    def position(self) -> Position:
        return (self.failed_at, self.id)

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "id": self.id,
            "failedAt": iso_timestamp(self.failed_at),
            "attempts": self.attempts,
            "error": self.error,
            "payload": self.payload,
        }


@dataclass(frozen=True)
class EntryOutcome:
    id: str
    outcome: Outcome
    detail: str | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id, "outcome": self.outcome}
        if self.detail:
            body["detail"] = self.detail
        return body


class StuckWorkSource(Protocol):
    name: str

    async def list_entries(self, limit: int, before: Position | None) -> list[StuckEntry]:
        """Up to ``limit`` entries older than ``before`` (all when ``None``), newest first."""
        ...

    async def redrive(self, ids: list[str], actor: str) -> list[EntryOutcome]: ...

    async def delete(self, ids: list[str], actor: str) -> list[EntryOutcome]: ...


def row_ids(ids: list[str]) -> list[int]:
    """The ids that can be ``bigserial`` row ids; any other id matches no row (``not_found``)."""
    return [int(entry_id) for entry_id in ids if entry_id.isdigit() and len(entry_id) < 19]


def outcomes_in_order(
    ids: list[str], acted: dict[str, EntryOutcome], resolutions: dict[str, str]
) -> list[EntryOutcome]:
    """Outcomes in request order: what this request did (``acted``), otherwise what had been
    done before (``resolutions``: id → ``redriven``/``deleted``), otherwise ``not_found``."""
    outcomes = []
    for entry_id in ids:
        if entry_id in acted:
            outcomes.append(acted[entry_id])
        elif entry_id in resolutions:
            earlier: Outcome = "already_deleted" if resolutions[entry_id] == "deleted" else "already_redriven"
            outcomes.append(EntryOutcome(entry_id, earlier))
        else:
            outcomes.append(EntryOutcome(entry_id, "not_found"))
    return outcomes
