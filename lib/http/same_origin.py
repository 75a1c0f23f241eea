"""The one same-origin rule for requests a browser's cookie authenticates (issue 21).

A browser attaches the ``__session`` cookie to every request for this site, including one a
hostile page makes: a form ``POST``, ``fetch(url, {mode: "no-cors", method: "POST"})``,
``navigator.sendBeacon`` — the CORS-simple requests that need no preflight, sent with any of
the three simple content types. ``SameSite=Lax`` does not stop a sibling subdomain. So:

- a request is *cookie-authenticated* when it carries the session cookie and no Bearer token
  (``lib.auth.sessions.is_cookie_authenticated``, the one definition the session reader
  follows too). A page cannot add a Bearer header without a CORS preflight, which no route
  here grants, so a bearer client (a script, ``curl``, the queue, the cron) is never checked;
  ``Basic`` or ``Negotiate`` credentials, which a browser attaches to a cross-site form by
  itself, and malformed headers are checked like the cookie they leave in charge;
- a cookie-authenticated request with any method but GET, HEAD or OPTIONS — one that changes
  state or runs work — runs only when it comes from the site itself. With an ``Origin``, that
  origin must be the request's own or one of ``ERMIS_ALLOWED_ORIGINS`` (``Origin: null``, sent
  by sandboxed frames and cross-site redirects, never is). Without one, ``Sec-Fetch-Site`` must
  say ``same-origin``; a request with neither is refused (every current browser sends
  ``Origin`` with these methods);
- otherwise: 403 ``cross_origin_refused`` (JSON) before the gate or the handler runs.

``lib.http.routing.route`` applies ``check_same_origin`` to every method of every route, so a
route cannot forget it (``tests/security/test_same_origin.py`` walks them all).

*The request's own origin* is its scheme and host. Which headers name them is a trust decision:
a proxy in front of the function rewrites ``Host`` and says what the client asked for in
``X-Forwarded-Host`` / ``X-Forwarded-Proto``. Those are believed only when something we trust
set them — on Vercel (``VERCEL=1``: the edge overwrites both on every request), or off Vercel
when ``ERMIS_TRUST_FORWARDED_HEADERS=1`` says a proxy you run (the load balancer in front of
``scripts/serve``) overwrites them. Otherwise the ``Host`` header and the connection's own
scheme are the origin; a site served under another name (a TLS-terminating proxy that forwards
``Host`` unchanged) lists its public origin in ``ERMIS_ALLOWED_ORIGINS``.
"""

from __future__ import annotations

from starlette.requests import Request

from lib.auth.sessions import is_cookie_authenticated
from lib.http.errors import ApiError
from lib.settings import get_settings

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def own_origin(request: Request) -> str:
    """``scheme://host`` of this request, from the headers the deployment trusts."""
    headers = request.headers
    scheme, host = request.url.scheme, headers.get("host", "")
    if get_settings().trusts_forwarded_headers:
        scheme = headers.get("x-forwarded-proto", scheme).split(",")[0].strip()
        host = headers.get("x-forwarded-host", host).split(",")[0].strip()
    return f"{scheme}://{host}".lower()


def check_same_origin(request: Request) -> None:
    """403 ``cross_origin_refused`` unless a cookie-authenticated unsafe request is the site's own."""
    if request.method in SAFE_METHODS or not is_cookie_authenticated(request):
        return
    origin = request.headers.get("origin")
    if origin is None:
        if request.headers.get("sec-fetch-site") == "same-origin":
            return
        raise ApiError(403, "cross_origin_refused", "A cookie-authenticated action must come from this site.")
    origin = origin.strip().lower().rstrip("/")
    if origin != own_origin(request) and origin not in get_settings().allowed_origins:
        raise ApiError(403, "cross_origin_refused", "This action is refused from another site.")
