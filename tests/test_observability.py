"""lib.observability: one JSON line per error, secrets redacted, and real delivery to a
Sentry ingest endpoint (tests.support.sentry, a loopback HTTP server standing in for sentry.io)."""

from __future__ import annotations

import json

import pytest

from lib.observability import log_server_error, pseudonym
from tests.support.auth import TEST_CRON_SECRET
from tests.support.sentry import sentry_sink


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


def test_errors_reach_sentry_redacted(set_env, capsys: pytest.CaptureFixture[str]) -> None:
    with sentry_sink() as sink:
        set_env(SENTRY_DSN=sink.dsn)
        log_server_error("gdpr-erasure-purge", RuntimeError(f"leaked {TEST_CRON_SECRET}"), failed=1)
        items = sink.items()
    [event] = [item for item in items if item.get("exception")]
    assert event["tags"]["context"] == "gdpr-erasure-purge"
    assert event["extra"]["failed"] == 1
    serialized = json.dumps(items)
    assert "leaked [redacted]" in serialized
    assert TEST_CRON_SECRET not in serialized
    assert TEST_CRON_SECRET not in capsys.readouterr().err


def test_a_person_is_named_by_a_keyed_pseudonym(set_env) -> None:
    """The same person reads the same in every line; another key (another deployment) reads
    differently, so a guess cannot be tested without the key; without one, no reference at all."""
    set_env(ERMIS_PSEUDONYM_KEY="key-one")
    first = pseudonym("user_2abc")
    assert first == pseudonym("user_2abc") and first.startswith("person:") and len(first) == len("person:") + 16
    assert "user_2abc" not in first and pseudonym("user_2abd") != first
    set_env(ERMIS_PSEUDONYM_KEY="key-two")
    assert pseudonym("user_2abc") != first
    set_env(ERMIS_PSEUDONYM_KEY=None)
    assert pseudonym("user_2abc") == "person:unkeyed"
    assert pseudonym(None) is None
