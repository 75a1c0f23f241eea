"""A local server that speaks Upstash's Redis REST protocol in front of a real Redis.

So production's client (``upstash_redis``) can run on a laptop and in tests. The protocol:

- every request carries ``Authorization: Bearer <token>``; a wrong or missing token is a 401;
- ``POST /`` with a JSON array ``["SET", "k", "v"]`` runs one command →
  ``{"result": ...}``, or ``{"error": "..."}`` with status 400;
- ``POST /pipeline`` with an array of commands runs them in order →
  ``[{"result": ...} | {"error": ...}, ...]``;
- ``POST /multi-exec`` does the same inside ``MULTI``/``EXEC`` (atomic);
- ``GET|POST /cmd/arg/...`` path form, for curl;
- with ``Upstash-Encoding: base64`` every bulk string in a result is base64-encoded (status
  replies such as ``OK`` stay plain), which is how the Python client asks by default.

Run: ``scripts/upstash-local --port 8079 --redis-url redis://127.0.0.1:6379/0 --token T``.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
from typing import Any
from urllib.parse import unquote

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def _encode(value: Any, base64_encoding: bool) -> Any:
    if value == b"OK":
        return "OK"
    if isinstance(value, bytes):
        if base64_encoding:
            return base64.b64encode(value).decode()
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_encode(item, base64_encoding) for item in value]
    return value


def _command(raw: Any) -> list[str | int | float]:
    if not isinstance(raw, list) or not raw or not all(isinstance(x, (str, int, float)) for x in raw):
        raise ValueError("a command is a non-empty JSON array of strings and numbers")
    return raw


def upstash_rest_app(redis_url: str, token: str) -> Starlette:
    redis = Redis.from_url(redis_url)
    # Raw replies, as Upstash returns them (redis-py would turn EXPIRE's 1 into True, say).
    redis.response_callbacks.clear()

    async def run(command: list[Any], base64_encoding: bool) -> dict[str, Any]:
        try:
            result = await redis.execute_command(*command)
        except ResponseError as error:
            return {"error": str(error)}
        return {"result": _encode(result, base64_encoding)}

    def authorized(request: Request) -> bool:
        presented = request.headers.get("authorization", "").encode()
        expected = f"Bearer {token}".encode()
        return len(presented) == len(expected) and hmac.compare_digest(presented, expected)

    async def endpoint(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse({"error": "Unauthorized"}, 401)
        encoding = request.headers.get("upstash-encoding", "").lower() == "base64"
        path = request.url.path.strip("/")
        try:
            if request.method == "POST" and path in ("pipeline", "multi-exec"):
                commands = json.loads(await request.body())
                if not isinstance(commands, list) or not commands:
                    raise ValueError("expected a JSON array of commands")
                parsed = [_command(command) for command in commands]
                if path == "multi-exec":
                    return JSONResponse(await _multi_exec(redis, parsed, encoding))
                return JSONResponse([await run(command, encoding) for command in parsed])
            if path:
                command = [unquote(part) for part in path.split("/")]
                body = await request.body()
                if body:
                    command.append(body.decode())
            else:
                command = _command(json.loads(await request.body()))
        except (ValueError, UnicodeDecodeError) as error:
            return JSONResponse({"error": f"ERR {error}"}, 400)
        try:
            answer = await run(command, encoding)
        except RedisError as error:
            return JSONResponse({"error": f"ERR {error}"}, 500)
        return JSONResponse(answer, 400 if "error" in answer else 200)

    return Starlette(routes=[Route("/{path:path}", endpoint, methods=["GET", "POST"])])


async def _multi_exec(redis: Redis, commands: list[list[Any]], encoding: bool) -> list[dict[str, Any]]:
    pipe = redis.pipeline(transaction=True)
    for command in commands:
        pipe.execute_command(*command)
    results = await pipe.execute(raise_on_error=False)
    return [
        {"error": str(result)} if isinstance(result, Exception) else {"result": _encode(result, encoding)}
        for result in results
    ]


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Upstash REST protocol in front of a real Redis")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8079)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    app = upstash_rest_app(args.redis_url, args.token)
    print(f"upstash-local: http://{args.host}:{args.port} -> {args.redis_url}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
