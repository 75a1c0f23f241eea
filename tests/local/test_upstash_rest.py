"""lib.local.upstash_rest: the Upstash REST protocol, spoken to with raw HTTP."""

from __future__ import annotations

import base64

import httpx
import pytest


@pytest.fixture
async def rest(redis, upstash_rest_url):
    url, token = upstash_rest_url
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


async def test_bearer_token_is_required(upstash_rest_url) -> None:
    url, token = upstash_rest_url
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/", json=["PING"])).status_code == 401
        wrong = await client.post("/", json=["PING"], headers={"Authorization": f"Bearer {token}x"})
        assert wrong.status_code == 401
        assert wrong.json() == {"error": "Unauthorized"}


async def test_single_command_plain_and_base64(rest) -> None:
    assert (await rest.post("/", json=["SET", "k", "välue"])).json() == {"result": "OK"}
    assert (await rest.post("/", json=["GET", "k"])).json() == {"result": "välue"}
    encoded = await rest.post("/", json=["GET", "k"], headers={"Upstash-Encoding": "base64"})
    assert base64.b64decode(encoded.json()["result"]).decode() == "välue"
    assert (await rest.post("/", json=["SET", "k", "v"], headers={"Upstash-Encoding": "base64"})).json() == {
        "result": "OK"
    }
    assert (await rest.post("/", json=["INCR", "n"])).json() == {"result": 1}


async def test_command_error_is_a_400_with_the_redis_message(rest) -> None:
    await rest.post("/", json=["SET", "s", "text"])
    response = await rest.post("/", json=["LPUSH", "s", "x"])
    assert response.status_code == 400
    assert "WRONGTYPE" in response.json()["error"]


async def test_malformed_body_is_a_400(rest) -> None:
    for body in (b"not json", b"{}", b"[]", b'[["nested"]]'):
        response = await rest.post("/", content=body)
        assert response.status_code == 400, body
        assert response.json()["error"].startswith("ERR")


async def test_pipeline_reports_each_result(rest) -> None:
    response = await rest.post("/pipeline", json=[["SET", "a", "1"], ["LPUSH", "a", "x"], ["GET", "a"]])
    results = response.json()
    assert results[0] == {"result": "OK"}
    assert "WRONGTYPE" in results[1]["error"]
    assert results[2] == {"result": "1"}


async def test_multi_exec_is_atomic(rest) -> None:
    response = await rest.post("/multi-exec", json=[["INCR", "m"], ["INCR", "m"], ["GET", "m"]])
    assert response.json() == [{"result": 1}, {"result": 2}, {"result": "2"}]


async def test_path_form_for_curl(rest) -> None:
    assert (await rest.get("/set/greeting/hello%20world")).json() == {"result": "OK"}
    assert (await rest.get("/get/greeting")).json() == {"result": "hello world"}
