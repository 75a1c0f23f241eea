"""lib.http.security_headers: every answer of the bundle — its pages and files, every function's
JSON (successes, refusals, 404s, the typed 500), a stream — carries the Content-Security-Policy,
X-Frame-Options, X-Content-Type-Options and Referrer-Policy, once each, and no
Strict-Transport-Security over plain HTTP (the edge adds it); and the pages hold no inline
script or style the policy would block."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from starlette.routing import Route

from lib.http.app import function_app
from lib.http.security_headers import SECURITY_HEADERS, with_security_headers
from lib.local.paths import PROJECT_ROOT
from tests.security.conftest import ROUTER, served_methods
from tests.support.auth import session_headers
from tests.support.functions import client_for
from tests.support.security import record

pytestmark = pytest.mark.security

PAGES = ("/admin/", "/admin/console.js", "/admin/main.js", "/admin/console.css", "/realtime-demo.html",
         "/realtime-demo.js", "/realtime-demo.css", "/ermis-realtime.js")  # fmt: skip
ANSWERS = ("/api/feed", "/api/admin/flags", "/api/no-such-route", "/.env", "/__health")


def missing_headers(response: httpx.Response) -> list[str]:
    """The headers of ``SECURITY_HEADERS`` the response lacks, or has other or twice — and HSTS
    if a plain-HTTP answer carries it (only the HTTPS edge sends it: ``EDGE_HEADERS``)."""
    wrong = [name for name, value in SECURITY_HEADERS.items() if response.headers.get_list(name) != [value]]
    return wrong + (["Strict-Transport-Security"] if "strict-transport-security" in response.headers else [])


def assert_headers(response: httpx.Response) -> None:
    assert missing_headers(response) == [], response.request.url


async def test_pages_files_and_answers_carry_the_headers() -> None:
    async with client_for(ROUTER) as client:
        responses = [await client.get(path) for path in PAGES + ANSWERS]
    bad = [response.request.url.path for response in responses if missing_headers(response)]
    record("headers", "pages, files, 404s and the health check", tried=len(responses), bad=len(bad))
    assert bad == []
    assert {response.status_code for response in responses} <= {200, 401, 403, 404}


async def test_every_route_and_method_carries_them(db) -> None:
    async with client_for(ROUTER) as client:
        responses = [await client.request(method, path) for path, method in served_methods()]
    bad = [(response.request.method, response.request.url.path) for response in responses if missing_headers(response)]
    record("headers", "every route and method, unauthenticated", tried=len(responses), bad=len(bad))
    assert bad == []


async def test_a_stream_and_the_typed_500_carry_them(db, set_env, mint_token: Callable[..., str]) -> None:
    set_env(ERMIS_SSE_MAX_DURATION_S="0.5")
    async with (
        client_for(ROUTER) as client,
        client.stream("GET", "/api/feed/events", headers=session_headers(mint_token(org_id="org_h"))) as stream,
    ):
        assert stream.status_code == 200
        assert_headers(stream)

    async def fails(_request):
        raise RuntimeError("boom")

    async with client_for(function_app(Route("/x", fails))) as client:
        failed = await client.get("/x")
    assert failed.status_code == 500
    assert_headers(failed)


def test_a_response_that_sets_one_keeps_its_own() -> None:
    message = {"type": "http.response.start", "status": 200, "headers": [(b"X-Frame-Options", b"SAMEORIGIN")]}
    headers = with_security_headers(message)["headers"]
    assert [value for name, value in headers if name.lower() == b"x-frame-options"] == [b"SAMEORIGIN"]
    assert len(headers) == len(SECURITY_HEADERS)


@pytest.mark.parametrize("page", ["public/admin/index.html", "public/realtime-demo.html"])
def test_the_pages_hold_no_inline_script_or_style(page: str) -> None:
    html = (PROJECT_ROOT / page).read_text(encoding="utf-8")
    assert re.findall(r"<script(?![^>]*\ssrc=)[^>]*>", html) == []  # every script from a file
    assert "<style" not in html and " style=" not in html
    assert re.findall(r"\son[a-z]+\s*=", html) == []  # no inline handler
