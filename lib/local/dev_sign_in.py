"""The development sign-in: ``GET /__dev/sign-in?as=<persona>&next=/admin/`` on the dev server.

Clerk signs real sessions; locally ``scripts/dev`` verifies sessions with the development key
pair (``dev_keys``), so this route can mint one for a chosen persona, set it as the
``__session`` cookie (what a browser and ``EventSource`` send), and redirect to ``next`` (a path
on this server only). ``/__dev/sign-out`` clears it. It exists on the dev server only: ``lib/local``
is not deployed, and without the development key pair (a real ``CLERK_JWT_KEY`` given) it
answers 409 rather than mint tokens nothing would accept.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from lib.auth.sessions import SESSION_COOKIE
from lib.http.errors import error_response
from lib.local.dev_keys import mint_session_token

SESSION_SECONDS = 8 * 3600
DEMO_TENANT = "org_demo"
PERSONAS: dict[str, dict[str, Any]] = {
    "super_admin": {"sub": "user_dev_super_admin", "platform_role": "super_admin"},
    "ops": {"sub": "user_dev_ops", "platform_role": "ops"},
    "billing": {"sub": "user_dev_billing", "platform_role": "billing"},
    "compliance": {"sub": "user_dev_compliance", "platform_role": "compliance"},
    "owner": {"sub": "user_dev_owner", "org_id": DEMO_TENANT, "org_role": "org:owner"},
    "member": {"sub": "user_dev_member", "org_id": DEMO_TENANT, "org_role": "org:member"},
}


def sign_in_url(base_url: str, persona: str, next_path: str) -> str:
    return f"{base_url}/__dev/sign-in?as={persona}&next={next_path}"


def _local_path(value: str | None) -> str:
    # Only a path on this server: "//evil.example" or "https://..." would make this an open redirect.
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


def sign_in_endpoint(private_pem: str | None) -> Any:
    async def sign_in(request: Request) -> Response:
        if private_pem is None:
            return error_response(
                409, "dev_sign_in_unavailable", "CLERK_JWT_KEY is not the development key; sign in through Clerk."
            )
        persona = request.query_params.get("as", "")
        if persona not in PERSONAS:
            return error_response(400, "unknown_persona", f"as must be one of {', '.join(PERSONAS)}.")
        token = mint_session_token(private_pem, PERSONAS[persona], SESSION_SECONDS)
        response = RedirectResponse(_local_path(request.query_params.get("next")), status_code=303)
        # Readable by the page, as Clerk's own __session cookie is (its frontend keeps it fresh):
        # ermis-realtime.js keys the streams its tabs share by the user in it.
        response.set_cookie(SESSION_COOKIE, token, max_age=SESSION_SECONDS, httponly=False, samesite="lax")
        return response

    return sign_in


async def sign_out(request: Request) -> Response:
    response = RedirectResponse(_local_path(request.query_params.get("next")), status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response
