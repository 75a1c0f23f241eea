"""lib.platform.erasure: the request lifecycle and the all-or-nothing purge over the registry."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import pytest

from lib.jobs.ai_ledger_redrive import parse_entry, redrive_failed_ai_ledger_entries
from lib.platform.ai_ledger_retry import (
    DLQ_KEY,
    PROCESSING_KEY,
    QUEUE_KEY,
    Settled,
    acknowledge,
    claim_batch,
    dead_letter,
    retry_entry,
)
from lib.platform.ai_usage import AiUsage, persist_ai_usage
from lib.platform.erasure import (
    ERASURE_REGISTRY,
    REDIS_KEYS_OF_PERSON,
    cancel_data_erasure_request,
    confirm_data_erasure_request,
    create_data_erasure_request,
    erase_from_redis,
    get_data_erasure_request,
    list_due_data_erasure_requests,
    purge_postgres,
)
from lib.redis.client import get_redis
from lib.redis.commands import execute_command
from lib.streams.limits import KEY_PREFIX
from tests.support.db import table_refusing
from tests.support.security import record

# What the purge also counts, untouched in these cases: the channels, the Redis retry entries and keys.
UNTOUCHED = {"stream_channels": 0, "redis:ai-ledger-retry-entries": 0, "redis:keys": 0}


async def seed_personal_data(db) -> None:
    await db.execute(
        "INSERT INTO notifications (id, user_id, type, title) VALUES"
        " ('n1', 'user_gone', 'system', 'hello'), ('n2', 'user_gone', 'alert', 'x'),"
        " ('n3', 'user_stays', 'system', 'y')"
    )
    await db.execute(
        "INSERT INTO ai_usage_ledger (id, user_id, input_tokens) VALUES"
        " ('l1', 'user_gone', 5), ('l2', 'user_gone', 6), ('l3', 'user_gone', 7), ('l4', 'user_stays', 8)"
    )


async def personal_rows(db) -> tuple[list[str], list[tuple[str, str | None]]]:
    notifications = [row[0] for row in await (await db.execute("SELECT id FROM notifications ORDER BY id")).fetchall()]
    ledger = await (await db.execute("SELECT id, user_id FROM ai_usage_ledger ORDER BY id")).fetchall()
    return notifications, [tuple(row) for row in ledger]


def test_registry_covers_the_required_tables() -> None:
    entries = {(target.table, target.subject_column, target.action) for target in ERASURE_REGISTRY}
    assert ("notifications", "user_id", "delete") in entries
    assert ("ai_usage_ledger", "user_id", "anonymise") in entries


async def test_create_validates_and_sets_the_grace_window(db) -> None:
    with pytest.raises(ValueError):
        await create_data_erasure_request("   ")
    with pytest.raises(ValueError):
        await create_data_erasure_request("user", timedelta(days=-1))
    request = await create_data_erasure_request("user_gone", timedelta(days=30))
    assert request.status == "pending"
    assert timedelta(days=29, hours=23) < request.grace_ends_at - request.requested_at <= timedelta(days=30)
    assert await list_due_data_erasure_requests() == []


async def test_only_pending_requests_past_their_grace_are_due(db) -> None:
    due = await create_data_erasure_request("a", timedelta(0))
    await create_data_erasure_request("b", timedelta(days=1))
    cancelled = await create_data_erasure_request("c", timedelta(0))
    assert await cancel_data_erasure_request(cancelled.id) is True
    assert [request.id for request in await list_due_data_erasure_requests()] == [due.id]


async def test_confirm_purges_the_subject_only_and_records_counts(db) -> None:
    await seed_personal_data(db)
    request = await create_data_erasure_request("user_gone", timedelta(days=30))
    purged = await confirm_data_erasure_request(request.id)
    assert purged is not None and purged.status == "purged" and purged.purged_at is not None
    assert purged.purge_counts == {"notifications": 2, "stream_changes": 2, "ai_usage_ledger": 3, **UNTOUCHED}
    assert await personal_rows(db) == (["n3"], [("l1", None), ("l2", None), ("l3", None), ("l4", "user_stays")])
    stored = await get_data_erasure_request(request.id)
    assert stored == purged


async def test_confirm_of_a_request_no_longer_pending_is_none(db) -> None:
    request = await create_data_erasure_request("user_gone", timedelta(0))
    assert await cancel_data_erasure_request(request.id) is True
    assert await confirm_data_erasure_request(request.id) is None
    assert await cancel_data_erasure_request(request.id) is False
    other = await create_data_erasure_request("user_gone", timedelta(0))
    assert await confirm_data_erasure_request(other.id) is not None
    assert await confirm_data_erasure_request(other.id) is None
    assert await confirm_data_erasure_request(str(uuid.uuid4())) is None


async def test_a_purge_failing_half_way_leaves_everything_as_it_was(db) -> None:
    await seed_personal_data(db)
    request = await create_data_erasure_request("user_gone", timedelta(0))
    async with table_refusing(db, "ai_usage_ledger"):
        with pytest.raises(Exception, match="read-only today"):
            await confirm_data_erasure_request(request.id)
    assert (await get_data_erasure_request(request.id)).status == "pending"
    notifications, ledger = await personal_rows(db)
    assert notifications == ["n1", "n2", "n3"]  # deleted first, then rolled back
    assert ("l1", "user_gone") in ledger


# -- the person outside Postgres, and a redrive racing the purge -----------------------------

PERSON, OTHER = "user_erased", "user_kept"


def retry_usage(n: int, person: str) -> dict:
    return {"id": f"u-{n}", "tenant_scope_id": "org_e", "user_id": person, "model": "m", "input_tokens": n}


async def seed_retry_lists(count: int = 40) -> set[str]:
    """The person's and another's usage on all three lists (and a malformed entry naming the
    person on the DLQ — a write cut short — and their stream slots); returns the ids of the usage a redrive lands
    (the queued and the stranded: the DLQ waits for an operator)."""
    client = get_redis()
    queued = [retry_entry(retry_usage(n, PERSON if n % 2 else OTHER)) for n in range(count)]
    await execute_command(client, "LPUSH", QUEUE_KEY, *queued)
    stranded = [retry_entry(retry_usage(n, PERSON)) for n in range(count, count + 3)]
    await execute_command(client, "LPUSH", PROCESSING_KEY, *stranded)
    dead = [dead_letter(retry_entry(retry_usage(count + 3, PERSON), 9), "10 attempts failed"),
            dead_letter(f'{{"id": "u-99", "user_id": "{PERSON}", "mod', "malformed: not JSON")]  # fmt: skip
    await execute_command(client, "LPUSH", DLQ_KEY, *dead)
    await execute_command(client, "ZADD", f"stream-slots:user:{PERSON}", 1, "lease")
    return {f"u-{n}" for n in range(count + 3)}


async def what_redis_holds() -> list[str]:
    """Every key's name and every value it holds, as text."""
    client, seen = get_redis(), []
    for key in await execute_command(client, "KEYS", "*"):
        kind = await execute_command(client, "TYPE", key)
        values = {
            "list": ("LRANGE", key, 0, -1), "zset": ("ZRANGE", key, 0, -1), "string": ("GET", key),
            "set": ("SMEMBERS", key), "hash": ("HGETALL", key),
        }.get(str(kind), ("TYPE", key))  # fmt: skip
        seen += [str(key), json.dumps(await execute_command(client, *values), default=str)]
    return seen


async def places_naming_the_person(db) -> list[str]:
    """Every Redis key or value, ledger row and stream channel that still names the person."""
    places = [text for text in await what_redis_holds() if PERSON in text]
    rows = await (await db.execute("SELECT id, user_id FROM ai_usage_ledger")).fetchall()
    places += [f"ledger row {usage_id}" for usage_id, user_id in rows if user_id == PERSON]
    channel = await db.execute("SELECT channel FROM stream_channels WHERE channel = %s", (f"user|{PERSON}",))
    return places + [f"stream channel {row[0]}" for row in await channel.fetchall()]


async def lost_usages(db, usage_ids: set[str]) -> set[str]:
    return usage_ids - {row[0] for row in await (await db.execute("SELECT id FROM ai_usage_ledger")).fetchall()}


def interleavings(first: list[str], second: list[str]) -> list[tuple[str, ...]]:
    """Every order of the two sequences' steps that keeps each sequence's own order."""
    if not first or not second:
        return [tuple(first + second)]
    return [(first[0], *rest) for rest in interleavings(first[1:], second)] + [
        (second[0], *rest) for rest in interleavings(first, second[1:])
    ]


BATCH = ["claim", "land", "acknowledge"]
PURGE = ["redis", "postgres"]


@pytest.mark.security
@pytest.mark.parametrize("landing_fails", [False, True], ids=["lands", "fails and requeues"])
@pytest.mark.parametrize("order", interleavings(BATCH, PURGE), ids="-".join)
async def test_a_redrive_batch_in_any_order_with_the_purge_brings_no_one_back(
    db, redis, order: tuple[str, ...], landing_fails: bool
) -> None:
    """A redrive batch (claim, land in the ledger, acknowledge) and the purge (Redis, then
    Postgres) in each of the ten orders their steps can take, the batch landing or failing (its
    entries requeued): as both end, and after the next redrive, nothing names the person, and
    every usage is in the ledger once (theirs without them)."""
    usage_ids = await seed_retry_lists(count=6)
    request = await create_data_erasure_request(PERSON, grace=timedelta(0))
    client, claimed, counts = get_redis(), [], {}
    for step in order:
        if step == "claim":
            claimed = await claim_batch(client, 4)
        elif step == "land" and not landing_fails:
            await persist_ai_usage([parse_entry(raw)[0] for raw in claimed])
        elif step == "acknowledge":
            requeue = [retry_entry(json.loads(raw), 1) for raw in claimed] if landing_fails else [None] * len(claimed)
            await acknowledge(client, [Settled(raw, again) for raw, again in zip(claimed, requeue, strict=True)])
        elif step == "redis":
            counts = await erase_from_redis(PERSON)
        elif step == "postgres":
            assert await purge_postgres(request.id, counts) is not None
    places = await places_naming_the_person(db)  # as both end: not even for a while
    await redrive_failed_ai_ledger_entries()
    places, lost = places + await places_naming_the_person(db), await lost_usages(db, usage_ids)
    record("erasure", "a redrive batch and the purge, every order of their steps", tried=1, bad=len(places) + len(lost))
    assert (places, lost) == ([], set())


@pytest.mark.security
async def test_a_purge_beside_a_running_redrive_and_writers_leaves_nothing(db, redis_flavour: str) -> None:
    """The real thing at once: the redrive cron draining all three lists in small batches while
    the purge runs, and writers recording the person's usage straight to Postgres: when both are
    done nothing names the person, and no usage was lost."""
    usage_ids = await seed_retry_lists(count=300)
    await db.execute(
        "INSERT INTO stream_channels (channel, pruned_through) VALUES (%s, 0), ('user|user_kept', 0)",
        (f"user|{PERSON}",),
    )
    request = await create_data_erasure_request(PERSON, grace=timedelta(0))

    async def write_directly() -> None:
        for n in range(1000, 1040):
            await persist_ai_usage([AiUsage.model_validate(retry_usage(n, PERSON))])
            usage_ids.add(f"u-{n}")

    redrive = asyncio.create_task(redrive_failed_ai_ledger_entries(batch_size=7))
    writers = asyncio.create_task(write_directly())
    await asyncio.sleep(0.02)
    purged = await confirm_data_erasure_request(request.id)
    await asyncio.gather(redrive, writers)
    await redrive_failed_ai_ledger_entries()  # what the purge left rewritten on processing
    assert purged is not None and purged.purge_counts["stream_channels"] == 1
    assert purged.purge_counts["redis:keys"] == 1
    places, lost = await places_naming_the_person(db), await lost_usages(db, usage_ids)
    case = f"a purge beside a running redrive and writers ({redis_flavour})"
    record("erasure", case, tried=1, bad=len(places) + len(lost))
    assert (places, lost) == ([], set())
    kept = await db.execute("SELECT count(*) FROM stream_channels WHERE channel = 'user|user_kept'")
    assert await kept.fetchone() == (1,)


async def test_redis_unreachable_fails_the_purge_and_changes_nothing(db, set_env) -> None:
    await seed_personal_data(db)
    set_env(REDIS_URL="redis://127.0.0.1:9/0")
    request = await create_data_erasure_request("user_gone", grace=timedelta(0))
    with pytest.raises(Exception):  # noqa: B017 - whichever error the client raises; the point is what stays
        await confirm_data_erasure_request(request.id)
    assert (await get_data_erasure_request(request.id)).status == "pending"
    assert len((await personal_rows(db))[0]) == 3


def test_the_person_s_redis_keys_are_the_ones_the_stream_caps_use() -> None:
    assert REDIS_KEYS_OF_PERSON == (f"{KEY_PREFIX}:user:{{}}",)
