"""Hostile input stops at the door (issue 10): every function app refuses, with a 4xx JSON
error and before any handler runs,

- a path or query string carrying NUL or bytes that are not UTF-8 (400 ``invalid_request``):
  Postgres cannot store NUL in text, so such a value would otherwise become a 500 deep inside;
  a path over ``MAX_PATH_BYTES`` or a query over ``MAX_QUERY_BYTES`` (414 ``uri_too_long``),
  headers over ``MAX_HEADER_BYTES`` (431 ``headers_too_large``) — the same ``head_problem``
  guards the static files of the dev server and ``scripts/serve``;
- a body over the app's cap (413 ``body_too_large``; ``DEFAULT_MAX_BODY_BYTES``, 64 KiB — a
  queue message or a flag update is a few hundred bytes), whether announced by
  ``Content-Length`` or streamed, read once and replayed to the app;
- a body that is not UTF-8, holds NUL, or nests JSON deeper than ``MAX_JSON_DEPTH`` (400
  ``invalid_body``): a 5,000-deep array would otherwise exhaust the recursion of whichever
  JSON parser met it first.

Identifiers are checked where they are read, before SQL sees them: ``Identifier`` (for
pydantic bodies, ``lib.endpoints.request_bodies``) and ``lib.http.routing.dynamic_segment`` cap
them at ``MAX_ID_LENGTH`` and refuse NUL (a JSON ``\\u0000`` escape survives the body check).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lib.http.errors import error_response

DEFAULT_MAX_BODY_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32
MAX_ID_LENGTH = 200
MAX_PATH_BYTES = 2048  # the longest route with its ids is a few hundred bytes
MAX_QUERY_BYTES = 8192
MAX_HEADER_BYTES = 16 * 1024  # a session cookie is about 1 KB
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


def head_problem(scope: Scope) -> tuple[int, str, str] | None:
    """Why the request's head (target and headers) cannot be served — ``(status, code,
    message)`` — or ``None``."""
    if sum(len(name) + len(value) for name, value in scope["headers"]) > MAX_HEADER_BYTES:
        return 431, "headers_too_large", f"The headers are over {MAX_HEADER_BYTES} bytes."
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    targets = (("path", raw_path, MAX_PATH_BYTES), ("query string", scope["query_string"], MAX_QUERY_BYTES))
    for name, raw, limit in targets:
        if len(raw) > limit:
            return 414, "uri_too_long", f"The {name} is over {limit} bytes."
        if not _is_clean_text(unquote_to_bytes(raw)):
            return 400, "invalid_request", f"The {name} holds NUL or bytes that are not UTF-8."
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
        if (problem := head_problem(scope)) is not None:
            await error_response(*problem)(scope, receive, send)
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
