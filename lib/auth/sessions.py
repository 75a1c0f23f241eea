"""Clerk session verification, networkless (CONTRACTS §4).

A session is a Clerk session JWT signed RS256. It is verified with the PEM public key in
``CLERK_JWT_KEY`` (Clerk's "networkless" mode: no call to Clerk's key server), ``exp`` and
``nbf`` checked with 5 s leeway (they, and ``iat``, must be JSON numbers: RFC 7519's
NumericDate; PyJWT alone would take the string ``"1765000000"``), and ``azp`` checked against
``CLERK_AUTHORIZED_PARTIES`` when that list is set. The token comes from ``Authorization: Bearer`` or, for browsers and
``EventSource`` (which cannot set headers), the ``__session`` cookie. No key configured: no
session verifies (fail closed). The claims are checked here, once: ``sub`` and the roles must be
plain text, and ``org_id`` must be a tenant id, made canonical (``lib.auth.tenants``); a claim
that is neither makes the session invalid (401).
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from math import isfinite
from typing import Any

from starlette.requests import Request

from lib.auth.tenants import InvalidTenantId, canonical_tenant_id
from lib.lazy_imports import lazy_import
from lib.settings import get_settings, secret_or_none

jwt = lazy_import("jwt")
crypto_serialization = lazy_import("cryptography.hazmat.primitives.serialization")

LEEWAY_SECONDS = 5
TIME_CLAIMS = ("exp", "nbf", "iat")  # RFC 7519 NumericDates: JSON numbers, nothing else
MAX_CLAIM_LENGTH = 200
SESSION_COOKIE = "__session"


class SessionError(Exception):
    """The request carries no verifiable session; the message is safe to show the caller."""


@dataclass(frozen=True)
class Session:
    user_id: str
    tenant_scope_id: str | None
    org_role: str | None
    platform_role: str | None
    claims: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def verifies_for_s(self) -> float | None:
        """Seconds until the token stops verifying — its ``exp`` plus the leeway the check
        allows — or ``None`` for claims without one: what a stream opened with it lives at most
        (``lib.streams.limits``)."""
        expires = self.claims.get("exp")
        if not isinstance(expires, int | float) or isinstance(expires, bool):
            return None  # a verified session's exp is a number (verify_session_token)
        return expires + LEEWAY_SECONDS - time.time()


def bearer_token(request: Request) -> str | None:
    """The credentials of an ``Authorization: Bearer <token>`` header, if the request has one."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def is_cookie_authenticated(request: Request) -> bool:
    """Whether the session cookie is what authenticates the request: it carries the cookie and
    no Bearer token. Any other ``Authorization`` — ``Basic`` or ``Negotiate`` credentials a
    browser attaches by itself to a cross-site form, a malformed header — leaves the cookie in
    charge (``session_token_from``), so it is checked like a cookie (``lib.http.same_origin``)."""
    return SESSION_COOKIE in request.cookies and bearer_token(request) is None


def session_token_from(request: Request) -> str | None:
    """The session token: the Bearer token, else the ``__session`` cookie."""
    token = bearer_token(request)
    if token is not None:
        return token
    cookie = request.cookies.get(SESSION_COOKIE)
    return cookie.strip() if cookie and cookie.strip() else None


@lru_cache(maxsize=4)
def _public_key(pem: str) -> Any:
    # Accept the key with literal "\n" sequences too, the form most dashboards store it in.
    return crypto_serialization.load_pem_public_key(pem.replace("\\n", "\n").encode())


def verify_session_token(token: str) -> Session:
    settings = get_settings()
    pem = secret_or_none(settings.clerk_jwt_key)
    if pem is None:
        raise SessionError("Session verification is not configured.")
    try:
        key = _public_key(pem)
    except (ValueError, TypeError) as error:
        raise SessionError("Session verification key is invalid.") from error
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=["RS256"],
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "sub"], "verify_aud": False},
        )
    except jwt.ExpiredSignatureError as error:
        raise SessionError("The session has expired.") from error
    except jwt.ImmatureSignatureError as error:
        raise SessionError("The session is not valid yet.") from error
    except jwt.PyJWTError as error:
        raise SessionError("The session token is invalid.") from error

    for name in TIME_CLAIMS:
        value = claims.get(name)
        if name in claims and (isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value)):
            # PyJWT converts a string ("1765000000") where RFC 7519 wants a NumericDate; a
            # stream's deadline reads the claim as a number, so anything else is no session.
            raise SessionError(f"The session's {name} claim is not a number.")
    parties = settings.authorized_parties
    if parties and claims.get("azp") not in parties:
        raise SessionError("The session was issued for another origin.")
    return session_from_claims(claims)


def _text_claim(claims: dict[str, Any], name: str) -> str | None:
    """A string claim, trimmed (blank or not a string: ``None``); one holding a control
    character or a lone surrogate, or longer than ``MAX_CLAIM_LENGTH``, is no session — it
    would otherwise reach a query, a log line or a channel name."""
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    if len(value) > MAX_CLAIM_LENGTH or any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise SessionError(f"The session's {name} claim is not a valid identifier.")
    return value


def session_from_claims(claims: dict[str, Any]) -> Session:
    """The session the claims describe, with the tenant in its canonical form (``lib.auth.tenants``)."""
    user_id = _text_claim(claims, "sub")
    if user_id is None:
        raise SessionError("The session has no subject.")
    tenant = _text_claim(claims, "org_id")
    try:
        tenant_scope_id = None if tenant is None else canonical_tenant_id(tenant)
    except InvalidTenantId as error:
        raise SessionError(f"The session's org_id claim is not a tenant id: {error}") from None
    return Session(
        user_id=user_id,
        tenant_scope_id=tenant_scope_id,
        org_role=_text_claim(claims, "org_role"),
        platform_role=_text_claim(claims, "platform_role"),
        claims=claims,
    )


def session_from_request(request: Request) -> Session:
    token = session_token_from(request)
    if token is None:
        raise SessionError("No session: sign in first.")
    return verify_session_token(token)
