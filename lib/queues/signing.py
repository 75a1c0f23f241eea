"""Message HMAC, exactly as the spec's ``queues-adapter`` signs (so messages verify across
the TypeScript and Python producers).

Signing input: every field except ``signature``, as ``[key, value]`` entries sorted by key,
serialised as JavaScript's ``JSON.stringify`` writes that array — no whitespace, strings with
JSON escapes only for ``"``, ``\\``, control characters (non-ASCII stays as UTF-8), integers
as plain digits, and nested objects in JavaScript's property order (integer-like keys first,
ascending, then insertion order). For ``{"b": 1, "a": "x", "signature": "..."}`` the input is the UTF-8 bytes of
``[["a","x"],["b",1]]``. The signature is the hex HMAC-SHA256 of that input keyed by
``ERMIS_QUEUE_SIGNING_SECRET``.

Verification compares with ``hmac.compare_digest`` after a length check (64 hex characters),
accepts ``ERMIS_QUEUE_SIGNING_SECRET_NEXT`` too (key rotation: deploy the new key as NEXT,
switch producers, then promote it), and fails closed: with no secret, nothing verifies and
``sign_message`` raises.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

from lib.settings import get_settings, secret_or_none

SIGNATURE_FIELD = "signature"
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class SigningSecretMissing(RuntimeError):
    def __init__(self) -> None:
        super().__init__("ERMIS_QUEUE_SIGNING_SECRET is not set: refusing to publish an unverifiable message")


def _is_array_index(key: str) -> bool:
    return key.isdigit() and key.isascii() and str(int(key)) == key and int(key) < 2**32 - 1


def _js_property_order(value: Any) -> Any:
    """Nested objects in the order JavaScript enumerates them: array-index keys ascending,
    then the other keys in insertion order (what ``JSON.stringify`` writes)."""
    if isinstance(value, dict):
        indices = sorted((key for key in value if _is_array_index(key)), key=int)
        others = [key for key in value if not _is_array_index(key)]
        return {key: _js_property_order(value[key]) for key in indices + others}
    if isinstance(value, list):
        return [_js_property_order(item) for item in value]
    return value


def signing_input(message: dict[str, Any]) -> bytes:
    entries = sorted(
        ([key, _js_property_order(value)] for key, value in message.items() if key != SIGNATURE_FIELD),
        key=lambda entry: entry[0],
    )
    return json.dumps(entries, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def signature_for(message: dict[str, Any], secret: str) -> str:
    return hmac.new(secret.encode(), signing_input(message), hashlib.sha256).hexdigest()


def _secrets() -> list[str]:
    settings = get_settings()
    return [
        secret
        for secret in (
            secret_or_none(settings.ermis_queue_signing_secret),
            secret_or_none(settings.ermis_queue_signing_secret_next),
        )
        if secret
    ]


def sign_message(message: dict[str, Any]) -> dict[str, Any]:
    secret = secret_or_none(get_settings().ermis_queue_signing_secret)
    if secret is None:
        raise SigningSecretMissing()
    unsigned = {key: value for key, value in message.items() if key != SIGNATURE_FIELD}
    return {**unsigned, SIGNATURE_FIELD: signature_for(unsigned, secret)}


def verify_message(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    presented = message.get(SIGNATURE_FIELD)
    if not isinstance(presented, str) or not _HEX_DIGEST.match(presented):
        return False
    try:
        candidates = [signature_for(message, secret) for secret in _secrets()]
    except (TypeError, ValueError):  # a field JSON cannot carry: not a message we signed
        return False
    # Check every key (no early exit), each comparison constant-time.
    matches = [hmac.compare_digest(presented.encode(), expected.encode()) for expected in candidates]
    return any(matches)
