"""Gated routes: every method of every route names the gate that protects it.

``route(path, GET=guarded(CRON_BEARER, run), POST=guarded(surface("state"), run))`` builds a
Starlette ``Route`` whose endpoint admits the request through the method's gate, then runs the
handler. Before the gate, every unsafe method meets the one same-origin rule
(``lib.http.same_origin``): a cookie-authenticated request from another site is refused there,
for every route by construction. ``ApiError`` from any of them becomes its JSON response.
The endpoint carries a ``gates`` map (method → gate label) that the auth-guard test reads, so
an unguarded route cannot exist without failing CI.

Paths are the full public paths (``/api/stories/{storyId}/events``), so the same app answers
under the dev server, on Vercel and behind Mangum. A dynamic segment is read with
``dynamic_segment``: Vercel's routes rewrite ``/api/stories/abc/events`` to
``/api/stories/[storyId]/events?storyId=abc``, and the function may see either path, so the
query's value comes first and the path's second.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lib.auth.gates import Gate
from lib.http.errors import ApiError
from lib.http.request_limits import MAX_ID_LENGTH
from lib.http.same_origin import check_same_origin

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class GatedEndpoint:
    gate: Gate
    handler: Handler


def dynamic_segment(request: Request, name: str) -> str:
    """The value of ``[name]`` in the function's file path, from the query or the path; longer
    than ``MAX_ID_LENGTH`` is a 400 before any query sees it."""
    value = request.query_params.get(name) or request.path_params[name]
    if len(value) > MAX_ID_LENGTH:
        raise ApiError(400, f"invalid_{name}", f"{name} is longer than {MAX_ID_LENGTH} characters.")
    return value


def guarded(gate: Gate, handler: Handler) -> GatedEndpoint:
    return GatedEndpoint(gate, handler)


def route(path: str, **by_method: GatedEndpoint) -> Route:
    """A route serving each given HTTP method (``GET=``, ``POST=``...) behind its own gate."""
    endpoints = {method.upper(): endpoint for method, endpoint in by_method.items()}
    if not endpoints:
        raise ValueError(f"route {path} serves no method")

    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        endpoint = endpoints[method]
        try:
            check_same_origin(request)
            await endpoint.gate.admit(request)
            return await endpoint.handler(request)
        except ApiError as error:
            return error.to_response()

    dispatch.gates = {method: endpoint.gate.label for method, endpoint in endpoints.items()}  # type: ignore[attr-defined]
    dispatch.__name__ = f"dispatch {path}"
    return Route(path, dispatch, methods=list(endpoints))
