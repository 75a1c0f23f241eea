"""The auth guard: every route of every api/ function declares a recognised gate for every
method it serves. A new unguarded route fails here, before it can land."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from lib.auth.gates import CRON_BEARER
from lib.http.app import function_app
from lib.http.routing import guarded, route
from lib.local.paths import PROJECT_ROOT
from lib.local.routing import discover_routes
from tests.support.functions import load_api_app

RECOGNISED = ("cron", "session", "surface:", "capability:", "message-hmac")


def unguarded_methods(app: Starlette) -> list[str]:
    """Every ``path METHOD`` of ``app`` without a recognised gate."""
    problems: list[str] = []
    for found in app.routes:
        if not isinstance(found, Route):
            problems.append(f"{getattr(found, 'path', found)!s} (not a gated route)")
            continue
        gates = getattr(found.endpoint, "gates", None)
        for method in sorted((found.methods or set()) - {"HEAD"}):
            label = (gates or {}).get(method)
            if label is None or not label.startswith(RECOGNISED):
                problems.append(f"{found.path} {method}")
    return problems


@pytest.mark.parametrize("file", sorted(route.file for route in discover_routes(PROJECT_ROOT)))
def test_every_route_has_a_gate(file: str) -> None:
    app = load_api_app(file)
    assert app.routes, f"{file} serves nothing"
    assert unguarded_methods(app) == []


def test_the_guard_catches_an_ungated_route() -> None:
    async def naked(_request):
        return JSONResponse({})

    app = function_app(route("/ok", GET=guarded(CRON_BEARER, naked)), Route("/naked", naked, methods=["GET", "POST"]))
    assert unguarded_methods(app) == ["/naked GET", "/naked POST"]
