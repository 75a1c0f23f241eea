"""Typed JSON errors (CONTRACTS §4 and §7).

Every error a client sees is ``{"error": {"code", "message", ...}}`` with a status code that
names the problem; an unexpected exception becomes the typed 500 ``internal_error`` after
being reported once through ``log_server_error``. Tracebacks never reach a response: the
typed 500 keeps the (redacted) description of its cause server-side, on the response object's
``REPORTED_ERROR`` attribute, where the cron history reads it.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from lib.observability import describe_error, log_server_error

REPORTED_ERROR = "ermis_reported_error"


class ApiError(Exception):
    """An expected failure with a status code and a stable machine-readable code."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def to_response(self) -> JSONResponse:
        return error_response(self.status, self.code, self.message, **self.details)


def error_response(status: int, code: str, message: str, **details: Any) -> JSONResponse:
    headers = {"Cache-Control": "no-store"}
    for detail, header in (("allow", "Allow"), ("retry_after", "Retry-After")):
        value = details.pop(detail, None)
        if value:
            headers[header] = value
    return JSONResponse({"error": {"code": code, "message": message, **details}}, status, headers)


def internal_error_response(route: str, error: BaseException) -> JSONResponse:
    """The spec's ``createInternalRouteErrorResponse``: report once, answer the typed 500."""
    log_server_error(route, error)
    response = error_response(500, "internal_error", "The server failed to handle this request.", route=route)
    setattr(response, REPORTED_ERROR, describe_error(error))
    return response
