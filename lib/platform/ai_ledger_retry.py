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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lib.clock import iso_timestamp
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
