"""Placeholders for functions that ``vercel.json`` already declares but whose issue has not
landed: each answers ``501 not_implemented`` behind its real gate, so the deployment layout,
the cron monitors and the auth-guard test are complete from day one and nothing pretends to
work. Each placeholder is replaced by its real handler when its issue lands.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from lib.http.errors import error_response
from lib.http.routing import Handler


def planned(issue: int) -> Handler:
    async def not_implemented(request: Request) -> Response:
        return error_response(
            501,
            "not_implemented",
            f"{request.url.path} is declared but not built yet; it lands with issue #{issue}.",
        )

    return not_implemented
