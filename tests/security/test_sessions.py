"""Session tokens and the role matrix, on every route and method of the bundle.

JWT games — no algorithm, HS256 keyed with the public key, another key, a ``kid``/``jku``
pointing elsewhere, PS256 or RS512 with the right key, claims altered under the original
signature, expired, not yet valid, no ``exp``, ``exp``/``nbf``/``iat`` that are not JSON numbers
(numeric strings, booleans, null, a list, NaN), no or non-string ``sub``, the wrong ``azp`` —
each made for a super admin, each sent to every method of every route that checks sessions:
401, every time. Then the full matrix: every route, method and persona (no session, each
platform role, each tenant role, a guest, the cron bearer), each answer compared with what
CONTRACTS §4 and §5 say that persona may do (written out below, not read from ``lib.auth.roles``).
"""

from __future__ import annotations

import base64
import hmac
import json
import time
from collections.abc import Callable

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from lib.auth.gates import CRON_BEARER
from tests.security.conftest import ROUTER, served_methods
from tests.support.auth import cron_headers
from tests.support.contract import SURFACE_ROLES
from tests.support.functions import client_for
from tests.support.security import record

pytestmark = pytest.mark.security

# CONTRACTS §5: the gate of each route's methods (§4's surfaces: tests.support.contract).
CRONS = {"/api/admin/rss/refresh": "rss", "/api/admin/ai/metering/flush": "metering",
         "/api/admin/ai/ledger/retry/flush": "ledger", "/api/admin/state/cleanup": "state",
         "/api/admin/erasure/purge": "erasure"}  # fmt: skip
GATES: dict[tuple[str, str], str] = {
    **{(path, "GET"): "cron" for path in CRONS},
    **{(path, "POST"): f"surface:{name}" for path, name in CRONS.items()},
    ("/api/admin/flags", "GET"): "surface:flags",
    ("/api/admin/flags", "PUT"): "surface:flags",
    **{(f"/api/admin/{name}", "GET"): "surface:queues"
       for name in ("queues", "crons", "audit", "dead-letters", "streams")},
    ("/api/admin/dead-letters", "POST"): "surface:queues",
    **{(f"/api/queues/rss/{stage}", "POST"): "message-hmac" for stage in ("ingest", "enrich", "cluster", "synthesize")},
    ("/api/queues/webhooks/deliver", "POST"): "message-hmac",
    **{(path, "GET"): "session" for path in
       ("/api/notifications/events", "/api/feed/events", "/api/notifications", "/api/feature-flags", "/api/feed")},
    ("/api/stories/story-1/events", "GET"): "capability:canEditStories",
    ("/api/stories/story-1", "GET"): "capability:canEditStories",
}  # fmt: skip
PERSONAS: dict[str, dict[str, str] | None] = {
    "no session": None,
    **{role: {"platform_role": role} for role in ("super_admin", "ops", "billing", "compliance")},
    **{role: {"org_id": "org_a", "org_role": role} for role in ("org:owner", "org:admin", "org:member", "org:guest")},
    "signed in, no role": {},
    "cron bearer": None,
}
EDITORS = {"super_admin", "org:owner", "org:admin", "org:member"}
SIGNED_IN = set(PERSONAS) - {"no session", "cron bearer"}


def may_pass(gate: str, persona: str) -> bool:
    if gate == "message-hmac":
        return True  # the consumer checks the message's signature, not the caller
    if gate == "cron":
        return persona == "cron bearer"
    if gate == "session":
        return persona in SIGNED_IN
    if gate == "capability:canEditStories":
        return persona in EDITORS
    return persona in SURFACE_ROLES[gate.removeprefix("surface:")]


async def answer(client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]) -> int:
    """The status only: a stream is closed as soon as its head arrives."""
    headers = {**headers, "content-type": "application/json"}
    async with client.stream(method, path, headers=headers, content="{}") as response:
        return response.status_code


def test_the_contract_table_names_every_route_the_bundle_serves() -> None:
    served = {(path, method) for path, method in served_methods() if method != "HEAD"}
    assert served == set(GATES)
    for app in ROUTER.apps.values():  # and the gates the routes declare are the contract's
        for found in app.routes:
            for method, label in found.endpoint.gates.items():
                assert GATES[(found.path.replace("{storyId}", "story-1"), method)] == label


async def test_every_route_method_and_persona_gets_what_the_contract_says(
    db, redis, served_url: str, mint_token
) -> None:
    headers_of: dict[str, dict[str, str]] = {"no session": {}, "cron bearer": cron_headers()}
    for persona, claims in PERSONAS.items():
        if claims is not None:
            headers_of[persona] = {"authorization": f"Bearer {mint_token(sub=f'user_{persona}', **claims)}"}
    wrong = []
    # Over a socket: an admitted stream is closed once its head is read (in-process, httpx would
    # wait for the whole body of a stream that does not end).
    async with httpx.AsyncClient(base_url=served_url, timeout=30) as client:
        for (path, method), gate in GATES.items():
            for persona, headers in headers_of.items():
                status = await answer(client, method, path, headers)
                if may_pass(gate, persona):
                    ok = status not in (401, 403) and status < 500
                else:
                    ok = status == (403 if persona in SIGNED_IN and gate != "cron" else 401)
                if not ok:
                    wrong.append((path, method, persona, status))
    record("sessions", "every route, method and persona against the contract", tried=len(GATES) * len(headers_of),
           bad=len(wrong))  # fmt: skip
    assert wrong == []


def _segments(token: str) -> list[str]:
    return token.split(".")


def _b64(data: dict | bytes) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _hs256_keyed_with(public_pem: str, claims: dict) -> str:
    """The classic confusion: an HMAC token whose secret is the RSA public key (PyJWT refuses
    to make one, so it is made by hand)."""
    signed = f"{_b64({'alg': 'HS256', 'typ': 'JWT'})}.{_b64(claims)}"
    return f"{signed}.{_b64(hmac.new(public_pem.encode(), signed.encode(), 'sha256').digest())}"


@pytest.fixture
def forged_tokens(session_keys: tuple[str, str], mint_token: Callable[..., str]) -> dict[str, str]:
    private_pem, public_pem = session_keys
    now = int(time.time())
    admin = {"sub": "user_mallory", "platform_role": "super_admin", "iat": now, "nbf": now, "exp": now + 600}
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    valid = mint_token(sub="user_mallory", platform_role="ops")
    header, payload, signature = _segments(valid)
    escalated = {**json.loads(base64.urlsafe_b64decode(payload + "==")), "platform_role": "super_admin"}
    return {
        "alg none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(admin)}.",
        "HS256 keyed with the public key": _hs256_keyed_with(public_pem, admin),
        "RS256 with another key": jwt.encode(admin, other_key, algorithm="RS256"),
        "another key named by kid and jku": jwt.encode(
            admin, other_key, algorithm="RS256", headers={"kid": "attacker", "jku": "https://evil.example/jwks"}
        ),
        "PS256 with the right key": jwt.encode(admin, private_pem, algorithm="PS256"),
        "RS512 with the right key": jwt.encode(admin, private_pem, algorithm="RS512"),
        "ops escalated to super_admin under the original signature": f"{header}.{_b64(escalated)}.{signature}",
        "signature cut off": f"{header}.{payload}.",
        "expired a minute ago": jwt.encode({**admin, "exp": now - 60}, private_pem, algorithm="RS256"),
        "not valid for a minute": jwt.encode({**admin, "nbf": now + 60}, private_pem, algorithm="RS256"),
        "no exp": jwt.encode({k: v for k, v in admin.items() if k != "exp"}, private_pem, algorithm="RS256"),
        "no sub": jwt.encode({k: v for k, v in admin.items() if k != "sub"}, private_pem, algorithm="RS256"),
        "sub a number": jwt.encode({**admin, "sub": 42}, private_pem, algorithm="RS256"),
        "sub a list": jwt.encode({**admin, "sub": ["user_mallory"]}, private_pem, algorithm="RS256"),
        **{
            f"{claim} {kind}": jwt.encode({**admin, claim: value}, private_pem, algorithm="RS256")
            for claim, kind, value in (
                ("exp", "a numeric string", str(now + 600)),  # PyJWT alone accepts it
                ("nbf", "a numeric string", str(now - 10)),
                ("iat", "a numeric string", str(now)),
                ("exp", "true", True),
                ("nbf", "true", True),  # PyJWT alone reads it as 1
                ("iat", "false", False),
                ("exp", "null", None),
                ("iat", "null", None),
                ("exp", "a list", [now + 600]),
                ("exp", "NaN", float("nan")),
            )
        },
        "two tokens in one": f"{valid}.{valid}",
        "not a token": "not-a-token",
    }


@pytest.mark.parametrize("carrier", ["bearer", "cookie"])
async def test_forged_and_broken_tokens_are_401_on_every_session_route(
    db, redis, forged_tokens: dict[str, str], carrier: str
) -> None:
    checked = [
        (path, method) for (path, method), gate in GATES.items() if gate not in ("message-hmac", CRON_BEARER.label)
    ]
    wrong = []
    async with client_for(ROUTER) as client:
        for name, token in forged_tokens.items():
            headers = {"authorization": f"Bearer {token}"} if carrier == "bearer" else {
                "cookie": f"__session={token}", "origin": "http://function.test"}  # fmt: skip
            for path, method in checked:
                status = await answer(client, method, path, headers)
                if status != 401:
                    wrong.append((name, path, method, status))
    case = f"{len(forged_tokens)} forged or broken tokens ({carrier}), every session route"
    record("sessions", case, tried=len(forged_tokens) * len(checked), bad=len(wrong))
    assert wrong == []


async def test_a_token_for_another_origin_is_401_when_authorized_parties_are_set(db, set_env, mint_token) -> None:
    set_env(CLERK_AUTHORIZED_PARTIES="https://news.example")
    async with client_for(ROUTER) as client:
        statuses = {
            azp: await answer(
                client, "GET", "/api/feed", {"authorization": f"Bearer {mint_token(azp=azp, org_id='o')}"}
            )
            for azp in ("https://evil.example", "https://news.example.evil.example", "https://news.example")
        }
    record(
        "sessions", "azp of another origin", tried=2, bad=sum(status != 401 for status in list(statuses.values())[:2])
    )
    assert statuses == {
        "https://evil.example": 401,
        "https://news.example.evil.example": 401,
        "https://news.example": 200,
    }
