"""lib.auth.gates and lib.auth.roles through a real route: 401 without a session, 403 without
the surface or capability, and the surface/capability tables of CONTRACTS §4."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import CRON_BEARER, SESSION, capability, surface
from lib.auth.roles import PLATFORM_ROLES, SURFACE_ROLES
from lib.http.app import function_app
from lib.http.routing import guarded, route
from tests.support.auth import cron_headers, session_headers
from tests.support.contract import SURFACE_ROLES as EXPECTED_SURFACES
from tests.support.functions import client_for


async def who(request: Request) -> Response:
    session = getattr(request.state, "session", None)
    return JSONResponse({"user": session.user_id if session else None})


app = function_app(
    *(route(f"/surface/{name}", GET=guarded(surface(name), who)) for name in SURFACE_ROLES),
    route("/edit", GET=guarded(capability("canEditStories"), who)),
    route("/session", GET=guarded(SESSION, who)),
    route("/cron", GET=guarded(CRON_BEARER, who)),
)


def test_surface_table_matches_the_contract() -> None:
    assert {name: set(roles) for name, roles in SURFACE_ROLES.items()} == EXPECTED_SURFACES


@pytest.mark.parametrize("surface_name", sorted(EXPECTED_SURFACES))
@pytest.mark.parametrize("role", sorted(PLATFORM_ROLES))
async def test_each_surface_admits_exactly_its_roles(
    surface_name: str, role: str, mint_token: Callable[..., str]
) -> None:
    async with client_for(app) as client:
        response = await client.get(f"/surface/{surface_name}", headers=session_headers(mint_token(platform_role=role)))
    expected = 200 if role in EXPECTED_SURFACES[surface_name] else 403
    assert response.status_code == expected
    if expected == 403:
        assert response.json()["error"]["code"] == "forbidden"


async def test_tenant_member_without_platform_role_is_refused_every_surface(
    mint_token: Callable[..., str],
) -> None:
    token = mint_token(org_id="org_a", org_role="org:owner")
    async with client_for(app) as client:
        for name in EXPECTED_SURFACES:
            assert (await client.get(f"/surface/{name}", headers=session_headers(token))).status_code == 403


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"org_id": "o", "org_role": "org:owner"}, 200),
        ({"org_id": "o", "org_role": "org:admin"}, 200),
        ({"org_id": "o", "org_role": "org:member"}, 200),
        ({"platform_role": "super_admin"}, 200),
        ({"platform_role": "ops"}, 403),
        ({"org_id": "o", "org_role": "org:guest"}, 403),
        ({}, 403),
    ],
)
async def test_can_edit_stories(claims: dict[str, str], expected: int, mint_token: Callable[..., str]) -> None:
    async with client_for(app) as client:
        response = await client.get("/edit", headers=session_headers(mint_token(**claims)))
    assert response.status_code == expected


@pytest.mark.parametrize("path", ["/surface/state", "/edit", "/session"])
async def test_no_or_bad_session_is_401(path: str, mint_token: Callable[..., str]) -> None:
    async with client_for(app) as client:
        assert (await client.get(path)).status_code == 401
        bad = await client.get(path, headers=session_headers("not-a-jwt"))
        assert bad.status_code == 401
        assert bad.json()["error"]["code"] == "unauthorized"
        expired = mint_token(platform_role="super_admin", org_role="org:owner", ttl_seconds=-60)
        assert (await client.get(path, headers=session_headers(expired))).status_code == 401


async def test_session_cookie_passes_the_session_gate(mint_token: Callable[..., str]) -> None:
    async with client_for(app) as client:
        client.cookies.set("__session", mint_token(sub="cookie_user"))
        response = await client.get("/session")
    assert response.json() == {"user": "cookie_user"}


async def test_cron_gate_refuses_a_session_and_accepts_the_bearer(mint_token: Callable[..., str]) -> None:
    async with client_for(app) as client:
        refused = await client.get("/cron", headers=session_headers(mint_token(platform_role="super_admin")))
        assert refused.status_code == 401
        assert (await client.get("/cron", headers=cron_headers())).status_code == 200
