"""lib.platform.erasure: the request lifecycle and the all-or-nothing purge over the registry."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from lib.platform.erasure import (
    ERASURE_REGISTRY,
    cancel_data_erasure_request,
    confirm_data_erasure_request,
    create_data_erasure_request,
    get_data_erasure_request,
    list_due_data_erasure_requests,
)
from tests.support.db import table_refusing_updates


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
    assert purged.purge_counts == {"notifications": 2, "stream_changes": 2, "ai_usage_ledger": 3}
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
    async with table_refusing_updates(db, "ai_usage_ledger"):
        with pytest.raises(Exception, match="read-only today"):
            await confirm_data_erasure_request(request.id)
    assert (await get_data_erasure_request(request.id)).status == "pending"
    notifications, ledger = await personal_rows(db)
    assert notifications == ["n1", "n2", "n3"]  # deleted first, then rolled back
    assert ("l1", "user_gone") in ledger
