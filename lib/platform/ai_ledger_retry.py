"""The AI ledger retry queue in Redis (spec: ``ledger-retry-queue``), with its three lists:

- ``ai-ledger:retry:queue`` — entries waiting; producers ``LPUSH``, the redrive takes from the
  right, so the oldest goes first;
- ``ai-ledger:retry:processing`` — entries claimed by a redrive and not yet acknowledged;
- ``ai-ledger:retry:dlq`` — entries given up on (``MAX_ATTEMPTS`` reached, or malformed).

An entry is JSON: ``id``, ``attempts`` (0 when first queued) and the ledger columns.

Claims move entries into the processing list (``LMOVE``, never ``RPOP``), so an entry is always
on some list: a crash between claim and acknowledgement leaves it on ``processing``, and the next
run's reclaim pass moves it back. Each step is one round trip whatever the batch size:
``reclaim``, ``claim`` and ``acknowledge`` are Lua scripts, atomic on the server. An
acknowledgement acts on a claimed entry only if the claim is intact — its raw text still on
``processing`` (``LREM`` removed it): then the entry's requeue or dead letter is pushed. An
entry rewritten meanwhile (an erasure took its person out) is left where it is, rewritten, for
the next run's reclaim: the redrive never writes back what it claimed before the erasure.

**The erasure's pause.** An erasure (``lib.platform.ai_ledger_erasure``) walks the lists in
slices, by index from their right ends; anything that removes or moves an entry meanwhile would
shift the indices under it. So while ``ai-ledger:retry:erasures`` holds a live entry (a sorted
set: one member per running erasure, scored by when it lapses, in Redis's own clock), every
script here that moves or removes entries stands still: reclaim and claim move nothing, an
acknowledgement leaves its claims on ``processing`` (the next run's reclaim lands them again;
landing is idempotent on the entry's id), and the operator's redrive and delete answer
``failed`` with the reason (``_ERASURE_RUNNING``). Producers keep pushing at the left end,
which moves no index counted from the right. A crashed erasure's pause lapses by itself (``ERASURE_PAUSE_MS``).

``LedgerDeadLetters`` is the DLQ as a source of stuck work for the operations console: list
(at most ``DLQ_SCAN_LIMIT`` items are read), redrive (back onto the queue, attempts reset, in
one Lua script that only moves an item still on the DLQ) and delete.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lib.clock import iso_timestamp
from lib.platform.stuck_work import EntryOutcome, Outcome, Position, StuckEntry, outcomes_in_order
from lib.redis.client import get_redis
from lib.redis.commands import execute_command

QUEUE_KEY = "ai-ledger:retry:queue"
PROCESSING_KEY = "ai-ledger:retry:processing"
DLQ_KEY = "ai-ledger:retry:dlq"
ERASURES_KEY = "ai-ledger:retry:erasures"

# Lua: whether an erasure is running (KEYS[ERASURES] holds a member that has not lapsed).
_ERASING = """
local function erasing(key)
  local now = redis.call('TIME')
  return redis.call('ZCOUNT', key, now[1] * 1000 + math.floor(now[2] / 1000), '+inf') > 0
end
"""

# Every entry stranded on processing goes back to the head of the queue (the right end);
# returns the queue's length after that, which bounds the run.
_RECLAIM_SCRIPT = (
    _ERASING
    + """
if erasing(KEYS[3]) then return redis.call('LLEN', KEYS[2]) end
while redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'RIGHT') do end
return redis.call('LLEN', KEYS[2])
"""
)

# Up to ARGV[1] entries from the head of the queue onto processing, returned in order.
_CLAIM_SCRIPT = (
    _ERASING
    + """
local claimed = {}
if erasing(KEYS[3]) then return claimed end
for i = 1, tonumber(ARGV[1]) do
  local entry = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not entry then break end
  claimed[i] = entry
end
return claimed
"""
)


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
    return int(await execute_command(client, "EVAL", _RECLAIM_SCRIPT, 3, PROCESSING_KEY, QUEUE_KEY, ERASURES_KEY))


async def claim_batch(client: Any, size: int) -> list[str]:
    claimed = await execute_command(client, "EVAL", _CLAIM_SCRIPT, 3, QUEUE_KEY, PROCESSING_KEY, ERASURES_KEY, size)
    return list(claimed or [])


def dead_letter(raw: str, reason: str) -> str:
    return json.dumps({"entry": raw, "reason": reason, "deadLetteredAt": iso_timestamp()})


# ARGV: a triple per claimed entry — its raw text, its requeue entry and its dead letter ('' for
# none). An entry's requeue and dead letter are pushed only when its raw text was still there;
# during an erasure nothing moves (the module's docstring).
_ACKNOWLEDGE_SCRIPT = (
    _ERASING
    + """
if erasing(KEYS[4]) then return 0 end
for i = 1, #ARGV, 3 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    if ARGV[i + 1] ~= '' then redis.call('LPUSH', KEYS[2], ARGV[i + 1]) end
    if ARGV[i + 2] ~= '' then redis.call('LPUSH', KEYS[3], ARGV[i + 2]) end
  end
end
return 0
"""
)


@dataclass(frozen=True)
class Settled:
    """What became of one claimed entry: landed (neither), requeued, or dead-lettered."""

    raw: str
    requeue: str | None = None
    dead_letter: str | None = None


async def acknowledge(client: Any, settled: Sequence[Settled]) -> None:
    """Drop the claimed entries from processing, requeuing and dead-lettering them as settled,
    atomically — each only if its claim is intact (see the module's docstring)."""
    if not settled:
        return
    arguments = [part for entry in settled for part in (entry.raw, entry.requeue or "", entry.dead_letter or "")]
    await execute_command(
        client, "EVAL", _ACKNOWLEDGE_SCRIPT, 4, PROCESSING_KEY, QUEUE_KEY, DLQ_KEY, ERASURES_KEY, *arguments
    )


# Operator actions on the DLQ (the ``ledger`` source of ``lib.platform.stuck_work``). An entry's
# id is a digest of its DLQ item, so malformed entries have ids too; an action claims the item
# with ``LREM``, which only one of two concurrent requests can win. ARGV[2] is the item's retry
# entry for a redrive, '' for a delete; -1 while an erasure runs.
DLQ_SCAN_LIMIT = 10_000
_TAKE_DEAD_LETTER_SCRIPT = (
    _ERASING
    + """
if erasing(KEYS[3]) then return -1 end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  if ARGV[2] ~= '' then redis.call('LPUSH', KEYS[2], ARGV[2]) end
  return 1
end
return 0
"""
)
_DLQ_KEYS = (DLQ_KEY, QUEUE_KEY, ERASURES_KEY)
_ERASURE_RUNNING = "an erasure is taking a person out of the retry lists; try again in a moment"


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

    async def _take(self, ids: list[str], action: Outcome) -> list[EntryOutcome]:
        client, items, acted = _client(), await self._items(), {}
        for entry_id in ids:
            item = items.get(entry_id)
            if item is None:
                continue
            retry = _retry_of(item) if action == "redriven" else ""
            if retry is None:
                acted[entry_id] = EntryOutcome(entry_id, "not_redrivable", "the entry has no ledger id")
                continue
            taken = await execute_command(client, "EVAL", _TAKE_DEAD_LETTER_SCRIPT, 3, *_DLQ_KEYS, item, retry)
            if int(taken) == 1:
                acted[entry_id] = EntryOutcome(entry_id, action)
            elif int(taken) == -1:
                acted[entry_id] = EntryOutcome(entry_id, "failed", _ERASURE_RUNNING)
        return outcomes_in_order(ids, acted, {})

    async def redrive(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        return await self._take(ids, "redriven")

    async def delete(self, ids: list[str], actor: str) -> list[EntryOutcome]:
        return await self._take(ids, "deleted")
