"""lib.db.state_store: KV reads ignore expired rows, prefixes match literally, hashes work."""

from __future__ import annotations

from datetime import timedelta

from lib.db import state_store


async def test_set_and_get_round_trip_json(db) -> None:
    await state_store.set_state("k", {"a": [1, 2, {"b": None}]})
    assert await state_store.get_state("k") == {"a": [1, 2, {"b": None}]}
    await state_store.set_state("k", "replaced")
    assert await state_store.get_state("k") == "replaced"
    assert await state_store.get_state("missing") is None


async def test_expired_rows_are_invisible_before_cleanup(db) -> None:
    await state_store.set_state("live", 1, ttl=timedelta(hours=1))
    await state_store.set_state("dead", 2, ttl=timedelta(seconds=-1))
    assert await state_store.get_state("live") == 1
    assert await state_store.get_state("dead") is None
    assert await state_store.list_state_keys_by_prefix("") == ["live"]
    row = await (await db.execute("SELECT count(*) FROM platform_state")).fetchone()
    assert row[0] == 2


async def test_setting_without_ttl_clears_an_old_expiry(db) -> None:
    await state_store.set_state("k", 1, ttl=timedelta(seconds=-1))
    await state_store.set_state("k", 2)
    assert await state_store.get_state("k") == 2


async def test_prefix_listing_treats_wildcards_literally(db) -> None:
    for key in (
        "platform:alerts-rules:a",
        "platform:alerts-rules:b",
        "platform:alertsXrules:c",
        "p%x",
        "pzx",
    ):
        await state_store.set_state(key, True)
    assert await state_store.list_state_keys_by_prefix("platform:alerts-rules:") == [
        "platform:alerts-rules:a",
        "platform:alerts-rules:b",
    ]
    assert await state_store.list_state_keys_by_prefix("platform:alerts_rules") == []
    assert await state_store.list_state_keys_by_prefix("p%") == ["p%x"]


async def test_delete_state(db) -> None:
    await state_store.set_state("k", 1)
    assert await state_store.delete_state("k") is True
    assert await state_store.delete_state("k") is False


async def test_hash_fields(db) -> None:
    await state_store.set_state_hash_field("h", "f1", {"n": 1})
    await state_store.set_state_hash_field("h", "f2", [1])
    await state_store.set_state_hash_field("h", "f1", {"n": 2})
    assert await state_store.get_state_hash("h") == {"f1": {"n": 2}, "f2": [1]}
    assert await state_store.get_state_hash_field("h", "f2") == [1]
    assert await state_store.get_state_hash_field("h", "nope") is None
    assert await state_store.delete_state_hash_field("h", "f2") is True
    assert await state_store.get_state_hash("h") == {"f1": {"n": 2}}
    await state_store.set_state_hash_field("h_other", "f", 0)
    assert await state_store.list_state_hash_keys_by_prefix("h") == ["h", "h_other"]
    assert await state_store.list_state_hash_keys_by_prefix("h_") == ["h_other"]
