"""lib.observability: one JSON line per error, secrets redacted, and real delivery to a
Sentry ingest endpoint (a loopback HTTP server standing in for sentry.io)."""

from __future__ import annotations

import gzip
import json
import threading

import pytest
import sentry_sdk
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lib.observability import log_server_error
from tests.support.auth import TEST_CRON_SECRET
from tests.support.servers import serve_in_thread


def stderr_lines(captured: str) -> list[dict]:
    return [json.loads(line) for line in captured.splitlines() if line.startswith("{")]


def test_one_json_line_with_context_and_fields(capsys: pytest.CaptureFixture[str]) -> None:
    log_server_error("queues:rss.ingest", ValueError("bad signature"), messageId="m-1", deliveryCount=2)
    [line] = stderr_lines(capsys.readouterr().err)
    assert line["level"] == "error"
    assert line["context"] == "queues:rss.ingest"
    assert line["error"] == "ValueError: bad signature"
    assert (line["messageId"], line["deliveryCount"]) == ("m-1", 2)


def test_configured_secrets_are_redacted_everywhere(capsys: pytest.CaptureFixture[str], set_env) -> None:
    set_env(POLAR_ACCESS_TOKEN="polar_oat_supersecret", DATABASE_URL="postgresql://app:db-pass-123@db.internal/x")
    log_server_error(
        "ctx",
        RuntimeError(f"auth failed with Bearer {TEST_CRON_SECRET} and polar_oat_supersecret"),
        header=f"Bearer {TEST_CRON_SECRET}",
        detail={"dsn": "postgresql://app:db-pass-123@db.internal/x"},
    )
    output = capsys.readouterr().err
    for secret in (TEST_CRON_SECRET, "polar_oat_supersecret", "db-pass-123"):
        assert secret not in output
    assert "[redacted]" in output


@pytest.fixture
def sentry_ingest():
    """A loopback Sentry: collects every envelope posted to /api/<project>/envelope/."""
    envelopes: list[list[dict]] = []
    arrived = threading.Event()

    async def envelope(request: Request) -> JSONResponse:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        items = []
        for raw in body.split(b"\n"):
            try:
                items.append(json.loads(raw))
            except ValueError:
                continue
        envelopes.append(items)
        arrived.set()
        return JSONResponse({})

    app = Starlette(routes=[Route("/api/{project}/envelope/", envelope, methods=["POST"])])
    with serve_in_thread(app) as url:
        yield url, envelopes, arrived
    sentry_sdk.get_client().close()


def test_errors_reach_sentry_redacted(sentry_ingest, set_env, capsys: pytest.CaptureFixture[str]) -> None:
    url, envelopes, arrived = sentry_ingest
    host = url.removeprefix("http://")
    set_env(SENTRY_DSN=f"http://publickey@{host}/42")
    log_server_error("gdpr-erasure-purge", RuntimeError(f"leaked {TEST_CRON_SECRET}"), failed=1)
    sentry_sdk.flush(timeout=5)
    assert arrived.wait(timeout=5)
    events = [item for items in envelopes for item in items if item.get("exception")]
    assert events, envelopes
    [event] = events
    assert event["tags"]["context"] == "gdpr-erasure-purge"
    assert event["extra"]["failed"] == 1
    serialized = json.dumps(envelopes)
    assert "leaked [redacted]" in serialized
    assert TEST_CRON_SECRET not in serialized
    assert TEST_CRON_SECRET not in capsys.readouterr().err
