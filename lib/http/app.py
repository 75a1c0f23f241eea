"""The function app builder: what every ``api/`` file calls to make its ``app``.

``function_app(*routes)`` returns a Starlette app with the bundle's invariants:

- hostile input refused before any handler (``request_limits``: NUL or non-UTF-8 in the
  target or body, bodies over ``max_body_bytes``, JSON nested too deep) → 400/413 JSON;
- unknown path → 404 JSON, method not served → 405 JSON with ``Allow``;
- any exception that escapes a handler → reported once, typed 500 JSON (never a traceback);
  an exception after a streaming response started is reported and the stream closed;
- ``run_after_response`` and the invocation memo work inside every request;
- every response, errors included, carries the bundle's security headers (``security_headers``);
- in production, the process refuses to start without what production needs
  (``refuse_to_start_unready``).
"""

from __future__ import annotations

import contextlib
import sys

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lib.http.errors import error_response, internal_error_response
from lib.http.request_limits import DEFAULT_MAX_BODY_BYTES, RequestLimitsMiddleware
from lib.http.security_headers import SecurityHeadersMiddleware
from lib.observability import log_server_error
from lib.runtime.after_response import AfterResponseMiddleware
from lib.runtime.invocation import InvocationMemoMiddleware
from lib.settings import SettingsError, get_settings


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(404, "not_found", "No route for this path.")
    if exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", "")
        return error_response(405, "method_not_allowed", f"{request.method} is not served here.", allow=allow)
    return error_response(exc.status_code, "http_error", str(exc.detail))


class TypedServerErrorMiddleware:
    """Turns an escaped exception into the typed 500, logged exactly once."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as error:  # noqa: BLE001 - this is the last line of defence
            if started:
                # Too late for a status code: report, then end the body so the client sees a
                # closed stream (an EventSource reconnects) rather than a hung connection.
                log_server_error(scope["path"], error)
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await internal_error_response(scope["path"], error)(scope, receive, send)


def refuse_to_start_unready() -> None:
    """A production process missing a variable production needs (``Settings.production_refusal``)
    ends as it starts: one line on stderr naming the variable, exit status 1 — not a function
    that serves every request with the gap (an ``azp`` never checked, logs that name people)."""
    try:
        refusal = get_settings().production_refusal()
    except SettingsError:
        return  # a value out of its bounds: each request answers the typed 500 naming it, as before
    if refusal is not None:
        print(f"ermis: refusing to start: {refusal}", file=sys.stderr, flush=True)
        raise SystemExit(1)


def function_app(*routes: BaseRoute, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Starlette:
    refuse_to_start_unready()
    return Starlette(
        routes=list(routes),
        middleware=[
            Middleware(SecurityHeadersMiddleware),
            Middleware(InvocationMemoMiddleware),
            Middleware(AfterResponseMiddleware),
            Middleware(TypedServerErrorMiddleware),
            Middleware(RequestLimitsMiddleware, max_body_bytes=max_body_bytes),
        ],
        exception_handlers={404: _http_error, 405: _http_error},
    )
