"""The error sink: one JSON line on stderr per error, and Sentry when ``SENTRY_DSN`` is set.

``log_server_error`` is the spec's ``logServerError``: crons, queue consumers and
after-response work all report through it. Sentry is initialised lazily on the first report
(no import-time cost for a cold start) and once per DSN. Every configured secret is redacted
from the message and the fields before anything leaves the process, and Sentry is sent no
frame's local variables (whatever a failing function held: a signing key, a payload).

A person appears in a line or a report only as ``pseudonym(user_id)``: ``person:`` and the first
16 hex digits of an HMAC-SHA256 of their id keyed with ``ERMIS_PSEUDONYM_KEY`` — the same person
reads the same in every line (an incident can follow them), no one without the key can tell
who it is or test a guess, and once they are erased nothing in the logs names them. Without the
key, ``person:unkeyed``: no reference at all rather than one anybody could reverse.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import sys
import threading
from datetime import UTC, datetime
from typing import Any

from lib.lazy_imports import lazy_import
from lib.settings import get_settings, secret_or_none

sentry_sdk = lazy_import("sentry_sdk")

REDACTED = "[redacted]"
_sentry_lock = threading.Lock()
_sentry_dsn_in_use: str | None = None


def redact(text: str) -> str:
    for secret in sorted(get_settings().secret_values(), key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def pseudonym(user_id: str | None) -> str | None:
    """How logs and error reports name a person (see the module's docstring)."""
    if user_id is None:
        return None
    key = secret_or_none(get_settings().ermis_pseudonym_key)
    if key is None:
        return "person:unkeyed"
    return "person:" + hmac.new(key.encode(), user_id.encode(), hashlib.sha256).hexdigest()[:16]


def describe_error(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        message = str(error) or type(error).__name__
        return redact(f"{type(error).__name__}: {message}")
    return redact(error)


def log_server_error(context: str, error: BaseException | str, **fields: Any) -> None:
    """Report one server-side error: stderr always, Sentry when configured. Never raises."""
    safe_fields = {key: _redact_value(value) for key, value in fields.items()}
    line = {
        "level": "error",
        "context": context,
        "error": describe_error(error),
        "at": datetime.now(UTC).isoformat(),
        **safe_fields,
    }
    _write_line(line)
    _report_to_sentry(context, error, safe_fields)


def _write_line(line: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):  # the sink must never take the caller down
        sys.stderr.write(json.dumps(line, default=str) + "\n")
        sys.stderr.flush()


class OutageReport:
    """One component's outage in this process, reported once: the first failure is logged (and
    sent to Sentry), the failures after it are only counted, and the first success after them
    logs one recovery line saying how many there were. So a Redis outage under a thousand
    streams is one report and one recovery per process, not one per stream and per attempt."""

    def __init__(self, context: str) -> None:
        self.context = context
        self.failures = 0

    def failed(self, error: BaseException | str, **fields: Any) -> None:
        self.failures += 1
        if self.failures == 1:
            log_server_error(self.context, error, **fields)

    def succeeded(self) -> None:
        if self.failures:
            _write_line({"level": "info", "context": self.context, "recovered": True, "failures": self.failures,
                         "at": datetime.now(UTC).isoformat()})  # fmt: skip
            self.failures = 0


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return redact(json.dumps(value, default=str))


def ensure_sentry() -> bool:
    """Initialise sentry-sdk once for the configured DSN; False when Sentry is not configured."""
    global _sentry_dsn_in_use
    dsn = secret_or_none(get_settings().sentry_dsn)
    if dsn is None:
        return False
    with _sentry_lock:
        if _sentry_dsn_in_use != dsn or not sentry_sdk.get_client().is_active():
            sentry_sdk.init(
                dsn=dsn,
                default_integrations=False,
                # The SDK would send every frame's local variables with an exception: a tenant's
                # webhook signing key, a signature, a raw queue payload, whatever was in scope.
                # The message, the stack and the fields given here are what an error report needs.
                include_local_variables=False,
                before_send=_redact_sentry_event,
            )
            _sentry_dsn_in_use = dsn
    return True


def _redact_sentry_event(event: dict[str, Any], _hint: dict[str, Any]) -> dict[str, Any]:
    for exception in (event.get("exception") or {}).get("values") or []:
        if isinstance(exception.get("value"), str):
            exception["value"] = redact(exception["value"])
    if isinstance(event.get("message"), str):
        event["message"] = redact(event["message"])
    return event


def _report_to_sentry(context: str, error: BaseException | str, fields: dict[str, Any]) -> None:
    try:
        if not ensure_sentry():
            return
        with sentry_sdk.new_scope() as scope:
            scope.set_tag("context", context)
            for key, value in fields.items():
                scope.set_extra(key, value)
            if isinstance(error, BaseException):
                sentry_sdk.capture_exception(error)
            else:
                sentry_sdk.capture_message(f"{context}: {describe_error(error)}", level="error")
    except Exception as sentry_failure:  # noqa: BLE001 - reporting must not raise
        sys.stderr.write(
            json.dumps({"level": "error", "context": "sentry", "error": describe_error(sentry_failure)}) + "\n"
        )
