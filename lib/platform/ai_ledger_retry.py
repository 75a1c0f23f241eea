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
entry rewritten meanwhile (an erasure took its person out, ``erase_person``) is left where it
is, rewritten, for the next run's reclaim: the redrive never writes back what it claimed before
the erasure.

``erase_person`` is the erasure's part here (``lib.platform.erasure``): one script rewrites
every entry of the three lists whose ``user_id`` is the person's — the id set to null, the usage
kept, as the ledger keeps its rows — and replaces any other occurrence of the id in an entry
(a malformed one's raw text) with ``[erased]``.

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
from lib.platform.stuck_work import EntryOutcome, Position, StuckEntry, outcomes_in_order
from lib.redis.client import get_redis
from lib.redis.commands import execute_command

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


# ARGV: a triple per claimed entry — its raw text, its requeue entry and its dead letter ('' for
# none). An entry's requeue and dead letter are pushed only when its raw text was still there.
_ACKNOWLEDGE_SCRIPT = """
for i = 1, #ARGV, 3 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    if ARGV[i + 1] ~= '' then redis.call('LPUSH', KEYS[2], ARGV[i + 1]) end
    if ARGV[i + 2] ~= '' then redis.call('LPUSH', KEYS[3], ARGV[i + 2]) end
  end
end
return 0
"""


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
    await execute_command(client, "EVAL", _ACKNOWLEDGE_SCRIPT, 3, PROCESSING_KEY, QUEUE_KEY, DLQ_KEY, *arguments)


# KEYS: queue, processing, DLQ. ARGV[1]: the person's id. Rewrites each entry naming them: its
# user_id nulled (a DLQ item's inner entry too), any other occurrence of the id replaced.
_ERASE_SCRIPT = """
local person = ARGV[1]
local literal = person:gsub('%p', '%%%0')
local function without_person(raw)
  local ok, entry = pcall(cjson.decode, raw)
  if ok and type(entry) == 'table' and entry['user_id'] == person then
    entry['user_id'] = cjson.null
    raw = cjson.encode(entry)
  end
  return (raw:gsub(literal, '[erased]'))
end
local rewritten = 0
for _, key in ipairs(KEYS) do
  for index, raw in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if string.find(raw, person, 1, true) then
      local replacement
      local ok, item = pcall(cjson.decode, raw)
      if key == KEYS[3] and ok and type(item) == 'table' and type(item['entry']) == 'string' then
        item['entry'] = without_person(item['entry'])
        replacement = without_person(cjson.encode(item))
      else
        replacement = without_person(raw)
      end
      redis.call('LSET', key, index - 1, replacement)
      rewritten = rewritten + 1
    end
  end
end
return rewritten
"""


async def erase_person(user_id: str) -> int:
    """Take ``user_id`` out of every entry of the three lists, in one atomic script; returns how
    many entries named them. Nothing to do without Redis; Redis unreachable raises."""
    client = get_redis()
    if client is None:
        return 0
    return int(await execute_command(client, "EVAL", _ERASE_SCRIPT, 3, QUEUE_KEY, PROCESSING_KEY, DLQ_KEY, user_id))


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
