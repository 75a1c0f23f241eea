"""The spec's cron helpers (``cron-auth.ts``) besides the bearer check itself, which is
``lib.auth.cron.is_authorized_cron_request``.

- ``run_guarded_cron_handler(context, handler)``: an unexpected throw becomes the typed 500 of
  CONTRACTS §7, reported through ``log_server_error``, so the cron monitor sees an attributable
  failure instead of an opaque crash.
- ``report_cron_drain_failures(context, failed)``: a drain that reports failures is escalated to
  the error sink (and Sentry), because durable drains fail quietly otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response

from lib.http.errors import internal_error_response
from lib.observability import log_server_error


async def run_guarded_cron_handler(context: str, handler: Callable[[], Awaitable[Response]]) -> Response:
    try:
        return await handler()
    except Exception as error:  # noqa: BLE001 - becomes the typed 500
        return internal_error_response(context, error)


def report_cron_drain_failures(context: str, failed: int) -> None:
    if failed > 0:
        log_server_error(context, f"{failed} item(s) failed in this drain", failed=failed)
