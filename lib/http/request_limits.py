"""Hostile input stops at the door (issue 10): every function app refuses, with a 4xx JSON
error and before any handler runs,

- a path or query string carrying NUL or bytes that are not UTF-8 (400 ``invalid_request``):
  Postgres cannot store NUL in text, so such a value would otherwise become a 500 deep inside;
- a body over the app's cap (413 ``body_too_large``; ``DEFAULT_MAX_BODY_BYTES``, 64 KiB — a
  queue message or a flag update is a few hundred bytes), whether announced by
  ``Content-Length`` or streamed, read once and replayed to the app;
- a body that is not UTF-8, holds NUL, or nests JSON deeper than ``MAX_JSON_DEPTH`` (400
  ``invalid_body``): a 5,000-deep array would otherwise exhaust the recursion of whichever
  JSON parser met it first.

Identifiers are checked where they are read, before SQL sees them: ``Identifier`` (for
pydantic bodies) and ``lib.http.routing.dynamic_segment`` cap them at ``MAX_ID_LENGTH`` and refuse
NUL (a JSON ``\\u0000`` escape survives the body check).
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import unquote_to_bytes

from pydantic import StringConstraints
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lib.http.errors import error_response

DEFAULT_MAX_BODY_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32
MAX_ID_LENGTH = 200
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_LENGTH, pattern=r"^[^\x00]+$")]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# A JSON string (skipped whole, escapes included) or a bracket; C-speed over the body.
_JSON_STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _is_clean_text(raw: bytes) -> bool:
    if b"\x00" in raw:
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def json_depth_exceeds(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    depth = 0
    for token in _JSON_STRING_OR_BRACKET.finditer(raw):
        bracket = token.group()
        if bracket in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif bracket in (b"]", b"}"):
            depth -= 1
    return False


def _target_problem(scope: Scope) -> str | None:
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    for name, raw in (("path", unquote_to_bytes(raw_path)), ("query string", unquote_to_bytes(scope["query_string"]))):
        if not _is_clean_text(raw):
            return f"The {name} holds NUL or bytes that are not UTF-8."
    return None


def _body_problem(body: bytes) -> str | None:
    if not _is_clean_text(body):
        return "The body holds NUL or bytes that are not UTF-8."
    if json_depth_exceeds(body):
        return f"The body nests JSON deeper than {MAX_JSON_DEPTH} levels."
    return None


class RequestLimitsMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if (problem := _target_problem(scope)) is not None:
            await error_response(400, "invalid_request", problem)(scope, receive, send)
            return
        if scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        too_large = error_response(413, "body_too_large", f"The body is over this route's {self.max_body_bytes} bytes.")
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await too_large(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        if (problem := _body_problem(body)) is not None:
            await error_response(400, "invalid_body", problem)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # then wait for the disconnect, as the server would report it

    return replayed
