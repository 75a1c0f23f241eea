"""The one same-origin rule (``lib.http.same_origin``), on every route by construction.

Every method of every function, sent with a signed-in super admin's cookie the ways a hostile
page can send it without a preflight — a form or ``no-cors`` fetch from another site, a sibling
subdomain, a sandboxed frame (``Origin: null``), a browser that names no ``Origin`` but says
``Sec-Fetch-Site: cross-site``, one with ``Basic`` or ``Negotiate`` credentials the browser
attached by itself or a broken ``Authorization`` header — in each of the three CORS-simple
content types: every unsafe
method is 403 ``cross_origin_refused`` and nothing ran (every table and Redis are unchanged,
so no cron job, no flag, no dead letter, no queue message). The same requests from the site's
own origin, from a configured allowed origin and from bearer clients are not refused.
"""

from __future__ import annotations

import itertools

import httpx
import pytest
from starlette.responses import JSONResponse

from lib.auth.gates import SESSION
from lib.http.app import function_app
from lib.http.routing import guarded, route
from tests.security.conftest import ROUTER, UNSAFE_METHODS, everything_stored, served_methods
from tests.support.functions import client_for
from tests.support.security import record

pytestmark = pytest.mark.security

OWN = "http://function.test"
HOSTILE_SENDERS = {
    "another site": {"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
    "a sibling subdomain": {"origin": "http://evil.function.test", "sec-fetch-site": "same-site"},
    "a sandboxed frame (Origin: null)": {"origin": "null", "sec-fetch-site": "cross-site"},
    "no Origin, Sec-Fetch-Site: cross-site": {"sec-fetch-site": "cross-site"},
    "no Origin and no Sec-Fetch-Site": {},
    # Credentials a browser attaches by itself (a staging site's basic auth, Kerberos) or a
    # broken header: the cookie still authenticates the request, so it is checked.
    "another site, with the browser's Basic credentials": {
        "origin": "https://evil.example",
        "sec-fetch-site": "cross-site",
        "authorization": "Basic c3RhZ2luZzpzdGFnaW5n",
    },
    "another site, with Negotiate credentials": {"origin": "https://evil.example", "authorization": "Negotiate YIIB"},
    "another site, a Bearer header without a token": {"origin": "https://evil.example", "authorization": "Bearer  "},
}
SIMPLE_BODIES = {
    "text/plain": '{"action": "delete", "source": "queue", "ids": ["1"], "reason": "x"}',
    "application/x-www-form-urlencoded": "key=rssQueuePipeline&enabled=true",
    "multipart/form-data; boundary=b": '--b\r\nContent-Disposition: form-data; name="k"\r\n\r\nv\r\n--b--\r\n',
}
UNSAFE_SERVED = [(path, method) for path, method in served_methods() if method in UNSAFE_METHODS]


def test_the_walk_covers_every_unsafe_route() -> None:
    """The routes below are what the functions serve: a new state-changing route is walked too."""
    assert len(UNSAFE_SERVED) == 12  # with /api/queues/webhooks/deliver
    assert {path for path, _ in UNSAFE_SERVED} >= {"/api/admin/rss/refresh", "/api/admin/erasure/purge"}


@pytest.mark.parametrize("sender", HOSTILE_SENDERS)
async def test_every_unsafe_method_of_every_route_refuses_a_cross_site_cookie(
    db, redis, redis_url: str, operator_cookie: dict[str, str], sender: str
) -> None:
    before = await everything_stored(db, redis_url)
    answers = []
    async with client_for(ROUTER) as client:
        for (path, _), method, (content_type, body) in itertools.product(
            UNSAFE_SERVED, UNSAFE_METHODS, SIMPLE_BODIES.items()
        ):
            headers = {**operator_cookie, **HOSTILE_SENDERS[sender], "content-type": content_type}
            response = await client.request(method, path, headers=headers, content=body)
            answers.append((path, method, content_type, response.status_code, response.json()["error"]["code"]))
    after = await everything_stored(db, redis_url)
    served = {(path, method) for path, method in UNSAFE_SERVED}
    wrong = [
        answer
        for answer in answers
        if (answer[:2] in served and answer[3:] != (403, "cross_origin_refused"))
        or (answer[:2] not in served and answer[3] != 405)
    ]
    record("cross-site", f"every unsafe route, method and simple body, from {sender}", tried=len(answers),
           bad=len(wrong) + (before != after))  # fmt: skip
    assert wrong == []
    assert after == before  # nothing ran: no job, no flag, no dead-letter action, no message


async def test_the_sites_own_pages_and_bearer_clients_are_not_refused(
    db, redis, set_env, operator_cookie: dict[str, str], mint_token
) -> None:
    set_env(ERMIS_ALLOWED_ORIGINS="https://console.example, https://news.example/")
    bearer = {"authorization": f"Bearer {mint_token(platform_role='super_admin', sub='user_admin')}"}
    senders = {
        "own origin": {**operator_cookie, "origin": OWN, "sec-fetch-site": "same-origin"},
        "own origin, upper case": {**operator_cookie, "origin": OWN.upper()},
        "Sec-Fetch-Site: same-origin, no Origin": {**operator_cookie, "sec-fetch-site": "same-origin"},
        "an allowed origin": {**operator_cookie, "origin": "https://news.example", "sec-fetch-site": "same-site"},
        "a bearer client from anywhere": {**bearer, "origin": "https://evil.example"},
        "a bearer client with a cookie too": {**bearer, **operator_cookie},
    }
    refused = []
    async with client_for(ROUTER) as client:
        for (path, method), (name, headers) in itertools.product(UNSAFE_SERVED, senders.items()):
            response = await client.request(method, path, headers={**headers, "content-type": "application/json"},
                                            content="{}")  # fmt: skip
            if response.status_code == 403:
                refused.append((path, method, name, response.json()["error"]))
    assert refused == []
    runs = await (await db.execute("SELECT count(*) FROM cron_runs WHERE trigger = 'operator'")).fetchone()
    assert runs[0] >= 5 * len(senders)  # each operator job ran for each sender


async def test_a_new_route_gets_the_rule_without_asking_for_it(operator_cookie: dict[str, str]) -> None:
    ran = []

    async def change_something(_request) -> JSONResponse:
        ran.append(True)
        return JSONResponse({"changed": True})

    app = function_app(route("/api/new", DELETE=guarded(SESSION, change_something)))
    async with client_for(app) as client:
        hostile = await client.delete("/api/new", headers={**operator_cookie, "origin": "https://evil.example"})
        own = await client.delete("/api/new", headers={**operator_cookie, "origin": OWN})
    assert hostile.status_code == 403 and hostile.json()["error"]["code"] == "cross_origin_refused"
    assert own.status_code == 200 and ran == [True]


@pytest.mark.parametrize(
    ("environment", "headers", "allowed"),
    [
        ({}, {"x-forwarded-host": "ermis.example", "x-forwarded-proto": "https"}, False),
        ({"VERCEL": "1"}, {"x-forwarded-host": "ermis.example", "x-forwarded-proto": "https"}, True),
        ({"ERMIS_TRUST_FORWARDED_HEADERS": "1"}, {"x-forwarded-host": "ermis.example", "x-forwarded-proto": "https"},
         True),
        ({"ERMIS_TRUST_FORWARDED_HEADERS": "1"}, {"x-forwarded-host": "ermis.example"}, False),  # http, not https
    ],
)  # fmt: skip
async def test_forwarded_host_headers_count_only_where_a_trusted_proxy_sets_them(
    db, redis, set_env, operator_cookie: dict[str, str], environment: dict[str, str], headers, allowed: bool
) -> None:
    set_env(**environment)
    request = {**operator_cookie, **headers, "origin": "https://ermis.example", "content-type": "application/json"}
    async with client_for(ROUTER) as client:
        response = await client.put("/api/admin/flags", headers=request, json={"key": "instantAlerts", "enabled": True})
    assert (response.status_code == 200) is allowed, response.text
    if not allowed:
        assert response.json()["error"]["code"] == "cross_origin_refused"


async def test_a_json_route_refuses_a_body_not_declared_json(db, redis, operator_cookie: dict[str, str]) -> None:
    headers = {**operator_cookie, "origin": OWN}
    async with client_for(ROUTER) as client:
        for (method, path), (content_type, body) in itertools.product(
            [("PUT", "/api/admin/flags"), ("POST", "/api/admin/dead-letters")], SIMPLE_BODIES.items()
        ):
            response = await client.request(method, path, headers={**headers, "content-type": content_type},
                                            content=body)  # fmt: skip
            assert (response.status_code, response.json()["error"]["code"]) == (415, "unsupported_media_type")
    assert (await (await db.execute("SELECT count(*) FROM feature_flag_values")).fetchone())[0] == 0
    assert (await (await db.execute("SELECT count(*) FROM ops_audit_log")).fetchone())[0] == 0


def test_httpx_sends_no_origin_by_itself() -> None:
    """The bearer and no-Origin cases above rely on the client adding no header of its own."""
    request = httpx.Request("POST", f"{OWN}/x")
    assert "origin" not in request.headers and "sec-fetch-site" not in request.headers
