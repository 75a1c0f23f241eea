"""lib.jobs.cron_auth: the typed 500 for a throwing cron, and drain failures escalated."""

from __future__ import annotations

import json

import pytest
from starlette.responses import JSONResponse

from lib.jobs.cron_auth import report_cron_drain_failures, run_guarded_cron_handler


def error_lines(captured: str) -> list[dict]:
    return [json.loads(line) for line in captured.splitlines() if line.startswith("{")]


async def test_a_throwing_handler_becomes_the_typed_500(capsys: pytest.CaptureFixture[str]) -> None:
    async def explode() -> JSONResponse:
        raise ValueError("polar is down")

    response = await run_guarded_cron_handler("/api/admin/ai/metering/flush", explode)
    assert response.status_code == 500
    assert json.loads(response.body)["error"]["code"] == "internal_error"
    assert json.loads(response.body)["error"]["route"] == "/api/admin/ai/metering/flush"
    [logged] = error_lines(capsys.readouterr().err)
    assert logged["context"] == "/api/admin/ai/metering/flush"
    assert "polar is down" in logged["error"]


async def test_a_successful_handler_passes_through(capsys: pytest.CaptureFixture[str]) -> None:
    async def fine() -> JSONResponse:
        return JSONResponse({"ok": True})

    response = await run_guarded_cron_handler("ctx", fine)
    assert (response.status_code, json.loads(response.body)) == (200, {"ok": True})
    assert capsys.readouterr().err == ""


def test_drain_failures_are_reported_only_when_there_are_some(capsys: pytest.CaptureFixture[str]) -> None:
    report_cron_drain_failures("ai-ledger-redrive", 0)
    assert capsys.readouterr().err == ""
    report_cron_drain_failures("ai-ledger-redrive", 3)
    [logged] = error_lines(capsys.readouterr().err)
    assert logged["context"] == "ai-ledger-redrive"
    assert logged["failed"] == 3
