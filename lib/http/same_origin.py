"""Cross-site request refusal for state-changing routes a cookie can authenticate (issue 11).

A browser sends the ``__session`` cookie with any request to this origin, including one a
hostile page makes. ``same_origin_json(handler)`` wraps a state-changing handler (the dead-letter
actions, the flags ``PUT``) so that it runs only when:

1. the body is declared ``application/json`` — a cross-site form cannot send that without a
   CORS preflight, which these routes never grant → otherwise 415 ``unsupported_media_type``;
2. the request's ``Origin`` is the deployment's own (scheme and host of the request, as the
   platform's proxy forwards them: ``x-forwarded-proto`` / ``x-forwarded-host``, else the
   ``Host`` header) → otherwise 403 ``cross_origin_refused``. A request with no ``Origin`` is
   refused too when ``Sec-Fetch-Site`` says it is cross-site, or when only a cookie
   authenticates it; a bearer-token client (a script, ``curl``) needs no ``Origin``, since a
   hostile page cannot attach the header.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from lib.http.errors import ApiError
from lib.http.routing import Handler

_SAME_SITE_FETCHES = {"same-origin", "none"}


def own_origin(request: Request) -> str:
    scheme = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    host = request.headers.get("x-forwarded-host") or request.headers.get("host", "")
    return f"{scheme}://{host.split(',')[0].strip()}".lower()


def check_same_origin_json(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "The body must be sent as application/json.")
    origin = request.headers.get("origin")
    if origin is not None:
        if origin.lower() != own_origin(request):
            raise ApiError(403, "cross_origin_refused", "This action is refused from another site.")
        return
    if request.headers.get("sec-fetch-site", "same-origin") not in _SAME_SITE_FETCHES:
        raise ApiError(403, "cross_origin_refused", "This action is refused from another site.")
    if not request.headers.get("authorization"):
        raise ApiError(403, "cross_origin_refused", "A cookie-authenticated action must name its Origin.")


def same_origin_json(handler: Handler) -> Handler:
    async def checked(request: Request) -> Response:
        check_same_origin_json(request)
        return await handler(request)

    return checked
