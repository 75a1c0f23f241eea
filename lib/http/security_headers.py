"""The headers every response of the bundle carries: its pages (the operations console, the
realtime demo), its files and its API answers alike.

- ``Content-Security-Policy``: scripts, styles, images and connections from this origin only,
  no inline script or style, no plugin, no ``<base>``, forms posted only here, and
  ``frame-ancestors 'none'``: no page of another origin — nor a sibling subdomain, which still
  gets the Lax session cookie — can frame the console and make a click flip a flag. The pages
  keep every script and style in files (``public/``), so the policy needs no exception.
- ``X-Frame-Options: DENY``: the same refusal for browsers that predate ``frame-ancestors``.
- ``X-Content-Type-Options: nosniff``: a JSON answer or a file is never run as a script or a
  style because its bytes look like one.
- ``Referrer-Policy: no-referrer``: a console URL (its query) never leaves in a ``Referer``.

``EDGE_HEADERS`` adds ``Strict-Transport-Security`` (two years, subdomains too): browsers reach
the bundle over HTTPS only once they have seen it. It is sent by the HTTPS edge alone —
``vercel.json``'s ``headers`` (Vercel adds HSTS by itself only on ``.vercel.app`` domains, not
on a custom one) and the CloudFront distribution's response-headers policy on AWS
(``lib.ops.aws_streams``) — never by the function apps, which also answer plain HTTP on
loopback (``scripts/dev``, ``scripts/serve``), where the header means nothing.

One set for everything, as three places send it: the function apps (``function_app``: on
Vercel, on AWS and under ``scripts/serve``), the local router for the files of ``public/``
(``lib.local.server``), and ``vercel.json``'s ``headers`` for what Vercel serves itself (its
static files); a test holds ``vercel.json`` to ``EDGE_HEADERS``, and the deployment stage
reads them out of ``vercel build``'s own routes. A header a response already has is kept.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
STRICT_TRANSPORT_SECURITY_MAX_AGE_S = 63_072_000  # two years, what hstspreload.org asks for
EDGE_HEADERS: dict[str, str] = {
    **SECURITY_HEADERS,
    "Strict-Transport-Security": f"max-age={STRICT_TRANSPORT_SECURITY_MAX_AGE_S}; includeSubDomains",
}
_RAW = [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]


def with_security_headers(message: Message) -> Message:
    """An ``http.response.start`` message with every header of ``SECURITY_HEADERS`` it lacks."""
    if message["type"] != "http.response.start":
        return message
    headers = list(message.get("headers", ()))
    present = {bytes(name).lower() for name, _ in headers}
    headers.extend((name, value) for name, value in _RAW if name not in present)
    return {**message, "headers": headers}


class SecurityHeadersMiddleware:
    """Adds ``SECURITY_HEADERS`` to every HTTP response of ``app`` (other messages pass as they are)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            await send(with_security_headers(message))

        await self.app(scope, receive, send_with_headers)
