"""lib.redis: the factory picks the right client, and the same operations give the same results
through the Upstash REST client (via scripts/upstash-local's server) and plain redis-py."""

from __future__ import annotations

import pytest

from lib.redis.client import close_redis, get_redis, redis_kind
from lib.redis.commands import execute_command, execute_pipeline


@pytest.fixture
async def client(redis_flavour: str):
    assert redis_kind() == redis_flavour
    return get_redis()


async def test_factory_prefers_upstash_then_redis_then_nothing(set_env, upstash_rest_url) -> None:
    from redis.asyncio import Redis as PlainRedis
    from upstash_redis.asyncio import Redis as UpstashRedis

    await close_redis()
    url, token = upstash_rest_url
    set_env(UPSTASH_REDIS_REST_URL=url, UPSTASH_REDIS_REST_TOKEN=token)
    assert isinstance(get_redis(), UpstashRedis)
    await close_redis()
    set_env(UPSTASH_REDIS_REST_TOKEN="")
    assert isinstance(get_redis(), PlainRedis)
    await close_redis()
    set_env(UPSTASH_REDIS_REST_URL=None, REDIS_URL=None)
    assert get_redis() is None


async def test_strings_with_expiry_and_nx(client) -> None:
    assert await execute_command(client, "SET", "lock", "token-1", "NX", "PX", 60000)
    assert not await execute_command(client, "SET", "lock", "token-2", "NX", "PX", 60000)
    assert await execute_command(client, "GET", "lock") == "token-1"
    assert 0 < await execute_command(client, "PTTL", "lock") <= 60000
    assert await execute_command(client, "INCR", "counter") == 1
    assert await execute_command(client, "GET", "missing") is None
    assert await execute_command(client, "DEL", "lock", "counter") == 2


async def test_unicode_and_json_values_survive(client) -> None:
    value = '{"headline": "Ελληνικά — ünïcode ✓", "n": 1}'
    await execute_command(client, "SET", "json", value)
    assert await execute_command(client, "GET", "json") == value


async def test_list_moves_keep_entries(client) -> None:
    await execute_command(client, "LPUSH", "queue", "a", "b", "c")
    assert await execute_command(client, "LMOVE", "queue", "processing", "RIGHT", "LEFT") == "a"
    assert await execute_command(client, "LRANGE", "processing", 0, -1) == ["a"]
    assert await execute_command(client, "LLEN", "queue") == 2
    assert await execute_command(client, "LMOVE", "empty", "processing", "RIGHT", "LEFT") is None


async def test_lua_script_runs_atomically(client) -> None:
    await execute_command(client, "RPUSH", "src", "1", "2", "3")
    script = (
        "local out = {} "
        "for i = 1, tonumber(ARGV[1]) do "
        "  local v = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') "
        "  if not v then break end "
        "  out[#out + 1] = v "
        "end "
        "return out"
    )
    assert await execute_command(client, "EVAL", script, 2, "src", "dst", 5) == ["1", "2", "3"]
    assert await execute_command(client, "LRANGE", "dst", 0, -1) == ["1", "2", "3"]


async def test_pipeline_and_atomic_pipeline(client) -> None:
    results = await execute_pipeline(client, [("SET", "p1", "x"), ("RPUSH", "pl", "a", "b"), ("GET", "p1")])
    assert results[1:] == [2, "x"] and results[0]
    atomic = await execute_pipeline(client, [("INCR", "n"), ("INCR", "n")], atomic=True)
    assert atomic == [1, 2]
    assert await execute_pipeline(client, []) == []
