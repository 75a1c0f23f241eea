"""The httpx client for requests a tenant can aim: every connection checked and pinned.

Why a transport of our own: the maintained options each miss a requirement. ``safehttpx``
(Gradio) accepts a host when *any* of its addresses is public, falls back to querying
dns.google over the internet, and serves GET only, with no redirect checks. ``httpx-secure``
learns a host's address by opening a TCP connection to it — a connection into our network is
made before the check. ``drawbridge`` is an alpha (0.1) whose allow list takes domain names
only, not the ``host:port`` and CIDR entries of ``ERMIS_EGRESS_ALLOW``, and does not judge the
IPv4-compatible IPv6 form.

How it works: httpcore opens every connection through a *network backend*
(``connect_tcp(host, port)``), given the URL's host. ``GuardedBackend`` resolves that host once
(``destinations.checked_addresses``), refuses unless every address may be reached, and connects
to the checked addresses only, so no second DNS answer is ever used (DNS rebinding). Nothing in
the request is rewritten: the ``Host`` header and the TLS server name stay the URL's, and the
pool keys connections by the URL's origin. Redirects (feeds only, at most ``MAX_REDIRECTS``)
are followed by ``GuardedSession``, each hop's URL checked before it is sent and its connection
made by the same backend. Environment proxies are ignored (``trust_env=False``): a proxy would
connect for us, unchecked.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin

import httpcore
import httpx

from lib.egress.destinations import (
    MAX_URL_CHARS,
    DestinationRefused,
    InvalidDestination,
    OutboundFailure,
    Resolver,
    check_url,
    checked_addresses,
    system_resolver,
)
from lib.observability import log_server_error

MAX_REDIRECTS = 5
_resolver: Resolver = system_resolver


@contextmanager
def resolving_with(resolver: Resolver) -> Iterator[None]:
    """Resolve host names with ``resolver`` inside the block (a test's DNS; a deployment's own)."""
    global _resolver
    previous, _resolver = _resolver, resolver
    try:
        yield
    finally:
        _resolver = previous


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses ``checked_addresses`` passed."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await checked_addresses(host, port, _resolver)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        assert failure is not None
        raise failure

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@lru_cache(maxsize=1)
def shared_ssl_context() -> ssl.SSLContext:
    """The TLS context of every guarded connection in the process (certifi's CA bundle): loading
    the bundle costs milliseconds per client, so it is loaded once."""
    return httpx.create_ssl_context(trust_env=False)


class GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__(verify=shared_ssl_context(), trust_env=False)
        # httpx builds its pool without a way to pass a network backend; httpcore's pool takes
        # one (its documented extension point), so the pool is rebuilt with ours.
        self._pool = httpcore.AsyncConnectionPool(ssl_context=shared_ssl_context(), network_backend=GuardedBackend())


class GuardedSession:
    """Requests to tenants' URLs over one pool of guarded connections (``async with``).

    The transport is used directly, not through ``httpx.AsyncClient``: the client parses every
    ``Location`` it is given, even with redirects off, and a receiver's malformed one would turn
    its plain 3xx answer into an exception. Here a 3xx is an answer unless the request asked to
    follow it, and then the next hop is checked (``check_url``) before anything is sent to it.
    """

    def __init__(self, *, timeout_s: float, headers: dict[str, str] | None = None) -> None:
        self.transport = GuardedTransport()
        self.headers = headers or {}
        self.timeouts = httpx.Timeout(timeout_s).as_dict()

    async def __aenter__(self) -> GuardedSession:
        await self.transport.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.transport.__aexit__(*exc_info)

    async def _send(self, method: str, url: str, headers: dict[str, str], content: bytes | None) -> httpx.Response:
        request = httpx.Request(
            method,
            check_url(url),
            headers={**self.headers, **headers},
            content=content,
            extensions={"timeout": self.timeouts},
        )
        response = await self.transport.handle_async_request(request)
        response.request = request
        return response

    @asynccontextmanager
    async def open(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        follow_redirects: bool = False,
    ) -> AsyncIterator[httpx.Response]:
        """The response to ``method url``, its body unread (closed on exit). With
        ``follow_redirects`` (GET only), up to ``MAX_REDIRECTS`` hops, each checked anew."""
        response = await self._send(method, url, headers or {}, content)
        try:
            hops = 0
            while follow_redirects and method == "GET" and response.status_code in _REDIRECTS:
                location = response.headers.get("location")
                if not location:
                    break
                if hops == MAX_REDIRECTS:
                    raise OutboundFailure(f"more than {MAX_REDIRECTS} redirects")
                await response.aclose()
                url, hops = urljoin(url, location), hops + 1
                response = await self._send(method, url, headers or {}, None)
            yield response
        finally:
            await response.aclose()


_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def is_final(error: BaseException) -> bool:
    """Whether asking again cannot change how a request failed, decided by the error's type: the
    guard refused the destination, or the URL is not one a request can be made to."""
    return isinstance(error, DestinationRefused | InvalidDestination | httpx.InvalidURL | httpx.UnsupportedProtocol)


def failure_detail(error: BaseException, timeout_s: float) -> str:
    """What a failed outbound request is recorded as: the guard's own words, or the kind of
    failure — never an exception's text, which can name the address a host resolved to."""
    if isinstance(error, OutboundFailure):
        return error.detail
    if isinstance(error, TimeoutError | httpx.TimeoutException):
        return f"no answer within {timeout_s:g} s"
    if isinstance(error, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return f"invalid URL: not an http(s) URL of at most {MAX_URL_CHARS} characters"
    if isinstance(error, httpx.ConnectError):
        return "could not connect"
    if not isinstance(error, httpx.HTTPError | OSError):
        # Not a way a request fails: report it, so a bug is not mistaken for a receiver's failure.
        log_server_error("egress", error)
    return f"the request failed ({type(error).__name__})"
