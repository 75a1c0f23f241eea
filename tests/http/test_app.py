"""lib.http.app: JSON 404/405, the typed 500 logged once, and errors after a stream started."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from lib.http.app import function_app
from lib.http.errors import ApiError
from lib.http.routing import guarded, route
from lib.local.paths import PROJECT_ROOT
from tests.support.functions import OPEN, client_for


async def boom(_request: Request) -> Response:
    raise RuntimeError("database exploded")


async def teapot(_request: Request) -> Response:
    raise ApiError(418, "teapot", "short and stout", hint="tip me over")


async def broken_stream(_request: Request) -> Response:
    async def chunks():
        yield b"first\n"
        raise RuntimeError("mid-stream failure")

    return StreamingResponse(chunks())


app = function_app(
    route("/api/boom", GET=guarded(OPEN, boom)),
    route("/api/teapot", GET=guarded(OPEN, teapot)),
    route("/api/stream", GET=guarded(OPEN, broken_stream)),
)


async def test_unknown_path_is_a_json_404() -> None:
    async with client_for(app) as client:
        response = await client.get("/api/nowhere")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_unserved_method_is_a_json_405_with_allow() -> None:
    async with client_for(app) as client:
        response = await client.delete("/api/boom")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert "GET" in response.headers["allow"]


async def test_unexpected_exception_is_the_typed_500_logged_once(capsys: pytest.CaptureFixture[str]) -> None:
    async with client_for(app) as client:
        response = await client.get("/api/boom")
    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "code": "internal_error",
            "message": "The server failed to handle this request.",
            "route": "/api/boom",
        }
    }
    assert "Traceback" not in response.text and "exploded" not in response.text
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert len(logged) == 1
    assert logged[0]["context"] == "/api/boom"
    assert "database exploded" in logged[0]["error"]


async def test_api_error_becomes_its_json_response() -> None:
    async with client_for(app) as client:
        response = await client.get("/api/teapot")
    assert response.status_code == 418
    assert response.json() == {"error": {"code": "teapot", "message": "short and stout", "hint": "tip me over"}}


async def test_failure_after_the_stream_started_is_logged_not_answered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with client_for(app) as client:
        response = await client.get("/api/stream")
    assert response.status_code == 200
    assert response.text == "first\n"
    assert "mid-stream failure" in capsys.readouterr().err


def import_function(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A fresh process importing one function as Vercel's runtime does (its cold start)."""
    load = "from lib.bundle import PROJECT_ROOT; from lib.runtime.functions import load_function_module as load;"
    return subprocess.run(
        [sys.executable, "-c", f"{load} load(PROJECT_ROOT, 'api/feed/index.py'); print('started')"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("missing", ["CLERK_AUTHORIZED_PARTIES", "ERMIS_PSEUDONYM_KEY"])
def test_a_production_function_without_what_production_needs_refuses_to_start(missing: str) -> None:
    ready = {**os.environ, "VERCEL_ENV": "production", "CLERK_AUTHORIZED_PARTIES": "https://news.example"}
    ready["ERMIS_PSEUDONYM_KEY"] = "pseudonym-key-for-the-test"
    started = import_function(ready)
    assert (started.returncode, started.stdout.strip()) == (0, "started"), started.stderr
    refused = import_function({**ready, missing: ""})
    assert (refused.returncode, refused.stdout) == (1, "")
    [line] = refused.stderr.strip().splitlines()  # one line, naming the variable
    assert line.startswith(f"ermis: refusing to start: {missing} must be set in production")
    preview = import_function({**ready, missing: "", "VERCEL_ENV": "preview"})
    assert preview.returncode == 0, preview.stderr
