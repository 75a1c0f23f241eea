"""lib.auth.sessions: networkless Clerk verification, header or cookie, failing closed."""

from __future__ import annotations

import time
from collections.abc import Callable

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.requests import Request

from lib.auth.sessions import SessionError, session_from_request, verify_session_token


def request_with(headers: dict[str, str] | None = None, cookie: str | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if cookie is not None:
        raw.append((b"cookie", f"__session={cookie}".encode()))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": b""})


def test_valid_token_from_header_gives_the_session(mint_token: Callable[..., str]) -> None:
    token = mint_token(sub="user_1", org_id="org_a", org_role="org:admin", platform_role="ops")
    session = session_from_request(request_with({"Authorization": f"Bearer {token}"}))
    assert (session.user_id, session.tenant_scope_id, session.org_role, session.platform_role) == (
        "user_1",
        "org_a",
        "org:admin",
        "ops",
    )


def test_cookie_is_accepted_for_browsers(mint_token: Callable[..., str]) -> None:
    session = session_from_request(request_with(cookie=mint_token(sub="user_cookie")))
    assert session.user_id == "user_cookie"
    assert session.tenant_scope_id is None and session.platform_role is None


def test_missing_token_is_rejected() -> None:
    with pytest.raises(SessionError):
        session_from_request(request_with())


def test_expired_token_is_rejected_beyond_the_leeway(session_keys: tuple[str, str]) -> None:
    now = int(time.time())
    expired = jwt.encode({"sub": "u", "exp": now - 10, "iat": now - 100}, session_keys[0], algorithm="RS256")
    with pytest.raises(SessionError, match="expired"):
        verify_session_token(expired)
    within_leeway = jwt.encode({"sub": "u", "exp": now - 2}, session_keys[0], algorithm="RS256")
    assert verify_session_token(within_leeway).user_id == "u"


def test_not_yet_valid_token_is_rejected(session_keys: tuple[str, str]) -> None:
    now = int(time.time())
    future = jwt.encode({"sub": "u", "nbf": now + 60, "exp": now + 600}, session_keys[0], algorithm="RS256")
    with pytest.raises(SessionError, match="not valid yet"):
        verify_session_token(future)


def test_token_signed_by_another_key_is_rejected() -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    forged = jwt.encode({"sub": "u", "exp": int(time.time()) + 60}, pem, algorithm="RS256")
    with pytest.raises(SessionError, match="invalid"):
        verify_session_token(forged)


def test_hmac_token_keyed_with_the_public_key_is_rejected(session_keys: tuple[str, str]) -> None:
    # The classic algorithm-confusion forgery: HS256 "signed" with the public key's bytes.
    header = jwt.utils.base64url_encode(b'{"alg":"HS256","typ":"JWT"}')
    payload = jwt.utils.base64url_encode(f'{{"sub":"u","exp":{int(time.time()) + 60}}}'.encode())
    import hashlib
    import hmac

    signing_input = header + b"." + payload
    signature = hmac.new(session_keys[1].encode(), signing_input, hashlib.sha256).digest()
    forged = (signing_input + b"." + jwt.utils.base64url_encode(signature)).decode()
    with pytest.raises(SessionError):
        verify_session_token(forged)


def test_no_configured_key_verifies_nothing(mint_token: Callable[..., str], set_env) -> None:
    token = mint_token()
    set_env(CLERK_JWT_KEY=None)
    with pytest.raises(SessionError, match="not configured"):
        verify_session_token(token)
    set_env(CLERK_JWT_KEY="   ")
    with pytest.raises(SessionError, match="not configured"):
        verify_session_token(token)


def test_key_with_escaped_newlines_is_accepted(
    mint_token: Callable[..., str], session_keys: tuple[str, str], set_env
) -> None:
    set_env(CLERK_JWT_KEY=session_keys[1].replace("\n", "\\n"))
    assert verify_session_token(mint_token(sub="escaped")).user_id == "escaped"


def test_authorized_parties_are_checked_when_configured(mint_token: Callable[..., str], set_env) -> None:
    set_env(CLERK_AUTHORIZED_PARTIES="https://app.ermis.ai, https://admin.ermis.ai")
    assert verify_session_token(mint_token(azp="https://admin.ermis.ai")).user_id == "user_test"
    with pytest.raises(SessionError, match="another origin"):
        verify_session_token(mint_token(azp="https://evil.example"))
    with pytest.raises(SessionError, match="another origin"):
        verify_session_token(mint_token())


def test_token_without_subject_is_rejected(session_keys: tuple[str, str]) -> None:
    token = jwt.encode({"exp": int(time.time()) + 60}, session_keys[0], algorithm="RS256")
    with pytest.raises(SessionError):
        verify_session_token(token)


@pytest.mark.parametrize(
    ("claim", "value"),
    [("exp", "1765000000"), ("exp", True), ("nbf", True), ("iat", "0"), ("iat", None), ("nbf", [0]), ("exp", {})],
)
def test_time_claims_that_are_not_json_numbers_are_refused_with_the_reason(
    session_keys: tuple[str, str], claim: str, value: object
) -> None:
    now = int(time.time())
    token = jwt.encode({"sub": "u", "iat": now, "exp": now + 600, claim: value}, session_keys[0], algorithm="RS256")
    with pytest.raises(SessionError, match=f"{claim} claim is not a number|invalid|expired|required"):
        verify_session_token(token)


@pytest.mark.parametrize("exp_after_s", [600.75, 10.0**12, 1e300])
def test_numeric_exp_of_any_size_is_a_bounded_deadline(session_keys: tuple[str, str], exp_after_s: float) -> None:
    """A float or huge ``exp`` is a number: the session verifies, and its stream's deadline is
    that number (a stream is also bounded by its own maximum, ``lib.streams.sse``)."""
    now = time.time()
    token = jwt.encode({"sub": "u", "exp": now + exp_after_s}, session_keys[0], algorithm="RS256")
    remaining = verify_session_token(token).verifies_for_s()
    assert remaining == pytest.approx(exp_after_s, abs=5)
