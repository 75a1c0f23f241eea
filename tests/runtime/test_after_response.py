"""lib.runtime.after_response over a real socket: the client has the response while the
deferred work is still running, failures go to the error sink, never to the response."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.runtime.after_response import run_after_response, wait_for_detached_work
from tests.support.functions import OPEN
from tests.support.servers import serve_in_thread

release = threading.Event()
finished = threading.Event()
sink: list[str] = []


async def slow_work() -> None:
    while not release.is_set():
        await asyncio.sleep(0.01)
    finished.set()


async def deferring(_request: Request) -> Response:
    run_after_response(slow_work)
    return JSONResponse({"answered": True})


async def failing(_request: Request) -> Response:
    async def broken() -> None:
        raise RuntimeError("deferred failure")

    run_after_response(broken)
    run_after_response(broken, on_error=lambda error: sink.append(str(error)))
    return JSONResponse({"answered": True})


app = function_app(
    route("/defer", GET=guarded(OPEN, deferring)),
    route("/fail", GET=guarded(OPEN, failing)),
)


def test_response_arrives_before_the_deferred_work_finishes() -> None:
    release.clear()
    finished.clear()
    with serve_in_thread(app) as url:
        response = httpx.get(f"{url}/defer", timeout=5)
        assert response.json() == {"answered": True}
        assert not finished.is_set()  # the work is still waiting for release
        release.set()
        assert finished.wait(timeout=5)


def test_failing_deferred_work_is_logged_and_the_response_is_untouched(
    capfd: pytest.CaptureFixture[str],
) -> None:
    sink.clear()
    with serve_in_thread(app) as url:
        response = httpx.get(f"{url}/fail", timeout=5)
        assert (response.status_code, response.json()) == (200, {"answered": True})
        deadline = time.monotonic() + 5
        while not sink and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sink == ["deferred failure"]
    logged = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    assert [(line["context"], line["error"]) for line in logged] == [
        ("after-response", "RuntimeError: deferred failure")
    ]


async def test_outside_a_request_the_work_runs_detached() -> None:
    done: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0.01)
        done.append("ran")

    run_after_response(work)
    assert done == []
    await wait_for_detached_work()
    assert done == ["ran"]


async def test_waiting_ignores_a_finished_task_whose_callback_never_ran_and_other_loops_tasks() -> None:
    """The hang seen on a cold first run: a finished task still in the detached set."""
    import threading

    from lib.runtime import after_response

    finished = asyncio.get_running_loop().create_task(asyncio.sleep(0))
    await finished  # done, but never discarded: as when its loop stopped before the callback ran
    stranded: list[asyncio.Future] = []

    def strand_a_task_on_a_closed_loop() -> None:
        other = asyncio.new_event_loop()
        stranded.append(other.create_future())  # pending for ever: its loop is gone
        other.close()

    worker = threading.Thread(target=strand_a_task_on_a_closed_loop)
    worker.start()
    worker.join()
    after_response._detached.update({finished, *stranded})
    await asyncio.wait_for(wait_for_detached_work(), timeout=5)
    assert not after_response._detached
