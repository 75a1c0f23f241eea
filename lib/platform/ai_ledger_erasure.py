"""One person out of the AI ledger's retry lists: found by value, rewritten in bounded slices,
and checked afterwards (the Redis part of ``lib.platform.erasure``).

**By value, never by text.** An entry is a person's when its ``user_id`` — the one field of a
ledger entry that carries a person — parsed out of the JSON equals their id, character for
character (a DLQ item's ``entry``, the raw text of the entry it gave up on, is parsed in turn).
So ``user_2abc1`` never matches ``user_2abc10``, and ``user_é_9`` matches however JSON wrote it
(``"user_\\u00e9_9"`` or raw UTF-8). The person's entries get ``"user_id": null`` (the usage is
kept, as the ledger keeps its rows); anyone else's entry is never written, so it stays
byte-identical. A malformed entry (a write cut short) is read the same way where it can be: each
``"user_id": "…"`` pair in its text, the value decoded and compared. Text that is not JSON at
all carries no field, and nothing in it is matched.

**Slices, and why the redrive pauses.** A list can hold 100,000 entries; one script over all of
it would block Redis for the length of the walk. The walk reads ``SLICE`` entries at a time
(``LRANGE``, counted from the list's right end) and rewrites the ones naming the person with a
compare-and-set script (``LSET`` only if the index still holds the text that was read): each
command is short, and each entry is rewritten atomically against anything else touching it.
Indices counted from the right stay put while producers push at the left; what would move them
(the redrive's claims and acknowledgements, the operator's DLQ actions) stands still while the
erasure holds its pause (``ai_ledger_retry``'s docstring). Entries pushed after the walk began
are not walked: ``entries_naming`` finds them, and the purge fails its verification rather than
call the person erased.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from lib.platform.ai_ledger_retry import DLQ_KEY, ERASURES_KEY, PROCESSING_KEY, QUEUE_KEY
from lib.redis.client import get_redis
from lib.redis.commands import execute_command

SLICE = 250  # entries read per LRANGE: far under a millisecond of Redis time
CHANGES_PER_SCRIPT = 50  # compare-and-sets per script
ERASURE_PAUSE_MS = 60_000  # a crashed erasure's pause lapses after this long
_PAUSE_REFRESH_S = ERASURE_PAUSE_MS / 1000 / 4

_USER_ID_PAIR = re.compile(r'(?P<key>"user_id"\s*:\s*)(?P<value>"(?:[^"\\]|\\.)*")', re.DOTALL)

# KEYS[1]: the pause set. ARGV: this erasure's token and how long its pause lasts (ms). Lapsed
# pauses are dropped; the token's lapse is set from Redis's own clock, as the scripts read it.
_PAUSE_SCRIPT = """
local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
return 1
"""

# KEYS[1]: a list. ARGV: triples (index, the text read there, its replacement). Returns
# {rewritten, moved}: an index that no longer holds what was read is left for a second read.
_REWRITE_SCRIPT = """
local rewritten, moved = 0, 0
for i = 1, #ARGV, 3 do
  local index = tonumber(ARGV[i])
  if redis.call('LINDEX', KEYS[1], index) == ARGV[i + 1] then
    redis.call('LSET', KEYS[1], index, ARGV[i + 2])
    rewritten = rewritten + 1
  else
    moved = moved + 1
  end
end
return {rewritten, moved}
"""


def _literal_without_person(raw: str, person: str) -> str | None:
    """A text that is not JSON (a write cut short): its ``"user_id": "…"`` pairs' values decoded
    and compared, the person's set to ``null``; ``None`` when none is theirs."""
    found = False

    def replace(match: re.Match[str]) -> str:
        nonlocal found
        try:
            value = json.loads(match.group("value"))
        except ValueError:
            return match.group(0)
        if value != person:
            return match.group(0)
        found = True
        return match.group("key") + "null"

    rewritten = _USER_ID_PAIR.sub(replace, raw)
    return rewritten if found else None


def entry_without_person(raw: str, person: str) -> str | None:
    """A queued or claimed entry rewritten without ``person``; ``None`` when it is not theirs."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return _literal_without_person(raw, person)
    if not isinstance(entry, dict) or entry.get("user_id") != person:
        return None
    return json.dumps({**entry, "user_id": None})


def dead_letter_without_person(raw: str, person: str) -> str | None:
    """A DLQ item (``{"entry": <raw entry>, "reason", "deadLetteredAt"}``) with its entry
    rewritten without ``person``; ``None`` when the entry is not theirs."""
    try:
        item = json.loads(raw)
    except ValueError:
        return _literal_without_person(raw, person)
    if not isinstance(item, dict) or not isinstance(item.get("entry"), str):
        return None
    entry = entry_without_person(item["entry"], person)
    return None if entry is None else json.dumps({**item, "entry": entry})


Rewrite = Callable[[str, str], "str | None"]
LISTS: tuple[tuple[str, Rewrite], ...] = (
    (QUEUE_KEY, entry_without_person),
    (PROCESSING_KEY, entry_without_person),
    (DLQ_KEY, dead_letter_without_person),
)


class RedrivePause:
    """This erasure's member of the pause set (``ai_ledger_retry``), kept alive while it works."""

    def __init__(self, client: Any) -> None:
        self.client, self.token, self.renewed_at = client, uuid.uuid4().hex, 0.0

    async def renew(self) -> None:
        await execute_command(self.client, "EVAL", _PAUSE_SCRIPT, 1, ERASURES_KEY, self.token, ERASURE_PAUSE_MS)
        self.renewed_at = time.monotonic()

    async def keep(self) -> None:
        """Renew the pause when a quarter of it has passed (one round trip, rarely)."""
        if time.monotonic() - self.renewed_at > _PAUSE_REFRESH_S:
            await self.renew()


@asynccontextmanager
async def redrive_paused() -> AsyncIterator[RedrivePause | None]:
    """The redrive and the DLQ actions stand still inside; ``None`` without Redis."""
    client = get_redis()
    if client is None:
        yield None
        return
    pause = RedrivePause(client)
    await pause.renew()
    try:
        yield pause
    finally:
        await execute_command(client, "ZREM", ERASURES_KEY, pause.token)


async def _walk(client: Any, key: str, person: str, rewrite: Rewrite, pause: RedrivePause | None, write: bool) -> int:
    """Walk ``key`` from its right end in slices; returns how many entries named ``person``
    (rewritten, when ``write``). Only the entries there when the walk began are walked."""
    length, visited, named = int(await execute_command(client, "LLEN", key)), 0, 0
    rereads = 0
    while visited < length:
        if pause is not None:
            await pause.keep()
        raws = await execute_command(client, "LRANGE", key, -(visited + SLICE), -(visited + 1)) or []
        changes = [
            (-(visited + len(raws) - offset), raw, replacement)
            for offset, raw in enumerate(raws)
            if (replacement := rewrite(raw, person)) is not None
        ]
        if not write:
            named += len(changes)
        moved = 0
        for start in range(0, len(changes) if write else 0, CHANGES_PER_SCRIPT):
            arguments = [part for change in changes[start : start + CHANGES_PER_SCRIPT] for part in change]
            done, missed = await execute_command(client, "EVAL", _REWRITE_SCRIPT, 1, key, *arguments)
            named, moved = named + int(done), moved + int(missed)
        if moved and rereads < 3:  # something moved the slice under us: read it again
            rereads += 1
            continue
        visited, rereads = visited + SLICE, 0
        if not raws:
            break
    return named


async def erase_person(person: str, pause: RedrivePause | None = None) -> int:
    """Take ``person`` out of the three lists; returns how many entries named them. Nothing
    to do without Redis; Redis unreachable raises."""
    client = get_redis()
    if client is None:
        return 0
    return sum([await _walk(client, key, person, rewrite, pause, write=True) for key, rewrite in LISTS])


async def entries_naming(person: str, pause: RedrivePause | None = None) -> int:
    """How many entries of the three lists still name ``person`` (the erasure's verification)."""
    client = get_redis()
    if client is None:
        return 0
    return sum([await _walk(client, key, person, rewrite, pause, write=False) for key, rewrite in LISTS])
