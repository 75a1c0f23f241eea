"""The AI ledger retry queue in Redis (spec: ``ledger-retry-queue``), with its three lists:

- ``ai-ledger:retry:queue`` — entries waiting; producers ``LPUSH``, the redrive takes from the
  right, so the oldest goes first;
- ``ai-ledger:retry:processing`` — entries claimed by a redrive and not yet acknowledged;
- ``ai-ledger:retry:dlq`` — entries given up on (``MAX_ATTEMPTS`` reached, or malformed).

An entry is JSON: ``id``, ``attempts`` (0 when first queued) and the ledger columns.

Claims move entries into the processing list (``LMOVE``, never ``RPOP``), so an entry is always
on some list: a crash between claim and acknowledgement leaves it on ``processing``, and the next
run's reclaim pass moves it back. Each step is one round trip whatever the batch size:
``reclaim`` and ``claim`` are Lua scripts doing their ``LMOVE``s atomically on the server, and
``acknowledge`` is one ``MULTI``/``EXEC`` (``LREM`` of every claimed raw entry, plus the
requeues and dead letters).

``LedgerDeadLetters`` is the DLQ as a source of stuck work for the operations console: list
(at most ``DLQ_SCAN_LIMIT`` items are read), redrive (back onto the queue, attempts reset, in
one Lua script that only moves an item still on the DLQ) and delete.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from lib.clock import iso_timestamp
from lib.platform.stuck_work import EntryOutcome, Position, StuckEntry, outcomes_in_order
from lib.redis.client import get_redis
from lib.redis.commands import execute_command, execute_pipeline

QUEUE_KEY = "ai-ledger:retry:queue"
PROCESSING_KEY = "ai-ledger:retry:processing"
DLQ_KEY = "ai-ledger:retry:dlq"

# Every entry stranded on processing goes back to the head of the queue (the right end);
# returns the queue's length after that, which bounds the run.
_RECLAIM_SCRIPT = """
while redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'RIGHT') do end
return redis.call('LLEN', KEYS[2])
"""

# Up to ARGV[1] entries from the head of the queue onto processing, returned in order.
_CLAIM_SCRIPT = """
local claimed = {}
for i = 1, tonumber(ARGV[1]) do
  local entry = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not entry then break end
  claimed[i] = entry
end
return claimed
"""


class RedisNotConfigured(RuntimeError):
    def __init__(self) -> None:
        super().__init__("redis_not_configured")


def _client() -> Any:
    client = get_redis()
    if client is None:
        raise RedisNotConfigured()
    return client


def retry_entry(ledger_fields: dict[str, Any], attempts: int = 0) -> str:
    return json.dumps({**ledger_fields, "attempts": attempts})


async def enqueue_ai_ledger_retry(ledger_fields: dict[str, Any]) -> None:
    await execute_command(_client(), "LPUSH", QUEUE_KEY, retry_entry(ledger_fields))


async def reclaim_stranded(client: Any) -> int:
    """Move every stranded entry back to the queue; returns the queue length."""
    return int(await execute_command(client, "EVAL", _RECLAIM_SCRIPT, 2, PROCESSING_KEY, QUEUE_KEY))


async def claim_batch(client: Any, size: int) -> list[str]:
    claimed = await execute_command(client, "EVAL", _CLAIM_SCRIPT, 2, QUEUE_KEY, PROCESSING_KEY, size)
    return list(claimed or [])


def dead_letter(raw: str, reason: str) -> str:
    return json.dumps({"entry": raw, "reason": reason, "deadLetteredAt": iso_timestamp()})


async def acknowledge(client: Any, claimed: Sequence[str], requeue: Sequence[str], dead_letters: Sequence[str]) -> None:
    """Drop the claimed raws from processing, and requeue / dead-letter, atomically."""
    commands: list[tuple[str | int, ...]] = [("LREM", PROCESSING_KEY, 1, raw) for raw in claimed]
    if requeue:
        commands.append(("LPUSH", QUEUE_KEY, *requeue))
    if dead_letters:
        commands.append(("LPUSH", DLQ_KEY, *dead_letters))
    await execute_pipeline(client, commands, atomic=True)


# Operator actions on the DLQ (the ``ledger`` source of ``lib.platform.stuck_work``). An entry's
# id is a digest of its DLQ item, so malformed entries have ids too; an action claims the item
# with ``LREM``, which only one of two concurrent requests can win.
DLQ_SCAN_LIMIT = 10_000
_REDRIVE_SCRIPT = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  redis.call('LPUSH', KEYS[2], ARGV[2])
  return 1
end
return 0
"""


def _dead_letter_id(item: str) -> str:
    return hashlib.sha256(item.encode()).hexdigest()[:20]


def _parse_json(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def _stuck_entry(item: str) -> StuckEntry:
    envelope = _parse_json(item)
    envelope = envelope if isinstance(envelope, dict) else {"entry": item, "reason": "unreadable dead letter"}
    entry = _parse_json(envelope.get("entry"))
    attempts = entry.get("attempts") if isinstance(entry, dict) else None
    try:
        failed_at = datetime.fromisoformat(str(envelope.get("deadLetteredAt")).replace("Z", "+00:00"))
    except ValueError:
        failed_at = datetime.fromtimestamp(0, UTC)
    return StuckEntry(
        "ledger",
        _dead_letter_id(item),
        failed_at,
        attempts + 1 if isinstance(attempts, int) else None,
        str(envelope.get("reason") or ""),
        entry if entry is not None else envelope.get("entry"),
    )


def _retry_of(item: str) -> str | None:
    """The queue entry that redrives a DLQ item, attempts reset; ``None`` when it has no id."""
    entry = _parse_json((_parse_json(item) or {}).get("entry"))
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
        return None
    return retry_entry({key: value for key, value in entry.items() if key != "attempts"})


class LedgerDeadLetters:
    name = "ledger"

    async def _items(self) -> dict[str, str]:
        items = await execute_command(_client(), "LRANGE", DLQ_KEY, 0, DLQ_SCAN_LIMIT - 1)
        return {_dead_letter_id(item): item for item in items or []}

    async def list_entries(self, limit: int, before: Position | None) -> list[StuckEntry]:
        entries = sorted((_stuck_entry(item) for item in (await self._items()).values()), key=lambda e: e.position)
        return [entry for entry in reversed(entries) if before is None or entry.position < before][:limit]

    async def redrive(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        client, items, acted = _client(), await self._items(), {}
        for entry_id in ids:
            item = items.get(entry_id)
            if item is None:
                continue
            retry = _retry_of(item)
            if retry is None:
                acted[entry_id] = EntryOutcome(entry_id, "not_redrivable", "the entry has no ledger id")
            elif await execute_command(client, "EVAL", _REDRIVE_SCRIPT, 2, DLQ_KEY, QUEUE_KEY, item, retry):
                acted[entry_id] = EntryOutcome(entry_id, "redriven")
        return outcomes_in_order(ids, acted, {})

    async def delete(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        client, items, acted = _client(), await self._items(), {}
        for entry_id in ids:
            item = items.get(entry_id)
            if item is not None and await execute_command(client, "LREM", DLQ_KEY, 1, item):
                acted[entry_id] = EntryOutcome(entry_id, "deleted")
        return outcomes_in_order(ids, acted, {})
