"""Message HMAC, exactly as the spec's ``queues-adapter`` signs (so messages verify across
the TypeScript and Python producers).

Signing input: every field except ``signature``, as ``[key, value]`` entries sorted by key
(JavaScript's ``<``: UTF-16 code units), serialised exactly as JavaScript's ``JSON.stringify``
writes that array (``lib.contracts.json_stringify``: ECMAScript's number layout, string escapes
and property order, for every value JSON can carry). For ``{"b": 1, "a": "x", "signature":
"..."}`` the input is the UTF-8 bytes of ``[["a","x"],["b",1]]``. The signature is the hex
HMAC-SHA256 of that input keyed by ``ERMIS_QUEUE_SIGNING_SECRET``. ``contracts/
queue-signing-vectors.json`` holds messages, inputs and signatures made by Node with the
TypeScript rule; any producer, in any language, checks itself against it.

A value JavaScript cannot hold exactly (an integer beyond ±(2**53-1), ``NaN``, an infinity, a
non-JSON type) is refused: ``sign_message`` raises ``UnrepresentableValue`` naming the field,
and a delivered message carrying one is rejected (``unrepresentable value: <field>: ...``),
logged and acknowledged like any message that does not verify.

Verification compares with ``hmac.compare_digest`` after a length check (64 hex characters),
accepts ``ERMIS_QUEUE_SIGNING_SECRET_NEXT`` too (key rotation: deploy the new key as NEXT,
switch producers, then promote it), and fails closed: with no secret, nothing verifies and
``sign_message`` raises.

Replay defence (as Stripe and QStash sign a timestamp): ``sign_message`` adds ``signedAt``
(milliseconds since the epoch) to the message, so the time is inside the signature, and a
message signed more than ``MAX_MESSAGE_AGE_S`` ago (the queue's 24 h maximum retention plus
``CLOCK_SKEW_S``) or more than ``CLOCK_SKEW_S`` in the future is refused. Messages of the
previous format (no ``signedAt``) verify only while ``ERMIS_QUEUE_LEGACY_SIGNATURES_UNTIL`` (an
ISO instant) is in the future: set it to the deploy time plus 24 h for the rollout, then drop it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from datetime import UTC, datetime
from typing import Any

from lib.contracts.json_stringify import UnrepresentableValue, json_stringify, quote_string, utf16_order
from lib.settings import get_settings, secret_or_none

SIGNATURE_FIELD = "signature"
SIGNED_AT_FIELD = "signedAt"
QUEUE_MAX_RETENTION_S = 24 * 3600
CLOCK_SKEW_S = 300
MAX_MESSAGE_AGE_S = QUEUE_MAX_RETENTION_S + CLOCK_SKEW_S
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class SigningSecretMissing(RuntimeError):
    def __init__(self) -> None:
        super().__init__("ERMIS_QUEUE_SIGNING_SECRET is not set: refusing to publish an unverifiable message")


def signing_input(message: dict[str, Any]) -> bytes:
    """The UTF-8 bytes of ``JSON.stringify`` of the ``[key, value]`` entries, ``signature``
    left out, sorted by key as JavaScript's ``<`` compares strings; ``UnrepresentableValue``
    (naming the field) for a value JavaScript would write differently."""
    if not all(isinstance(key, str) for key in message):
        raise UnrepresentableValue((), "a message's keys must be strings")
    entries = sorted(
        ((key, value) for key, value in message.items() if key != SIGNATURE_FIELD), key=lambda e: utf16_order(e[0])
    )
    text = ",".join(f"[{quote_string(key)},{json_stringify(value, (key,))}]" for key, value in entries)
    return f"[{text}]".encode()


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


def sign_message(message: dict[str, Any], signed_at_ms: int | None = None) -> dict[str, Any]:
    secret = secret_or_none(get_settings().ermis_queue_signing_secret)
    if secret is None:
        raise SigningSecretMissing()
    unsigned = {key: value for key, value in message.items() if key != SIGNATURE_FIELD}
    unsigned[SIGNED_AT_FIELD] = int(time.time() * 1000) if signed_at_ms is None else signed_at_ms
    return {**unsigned, SIGNATURE_FIELD: signature_for(unsigned, secret)}


def message_rejection(message: Any, now_s: float | None = None) -> str | None:
    """Why a message is refused (``invalid signature``, ``expired``, ...), or ``None`` when it
    is ours, fresh, and untampered."""
    if not isinstance(message, dict):
        return "invalid signature"
    presented = message.get(SIGNATURE_FIELD)
    if not isinstance(presented, str) or not _HEX_DIGEST.match(presented):
        return "invalid signature"
    try:
        candidates = [signature_for(message, secret) for secret in _secrets()]
    except UnrepresentableValue as error:  # no producer following the contract signs this
        return f"unrepresentable value: {error}"
    # Check every key (no early exit), each comparison constant-time.
    matches = [hmac.compare_digest(presented.encode(), expected.encode()) for expected in candidates]
    if not any(matches):
        return "invalid signature"
    now_s = time.time() if now_s is None else now_s
    signed_at = message.get(SIGNED_AT_FIELD)
    if signed_at is None:
        return None if _legacy_format_accepted(now_s) else "previous format (no signedAt) outside the rollout window"
    if isinstance(signed_at, bool) or not isinstance(signed_at, int):
        return "invalid signedAt"
    age_s = now_s - signed_at / 1000
    if age_s > MAX_MESSAGE_AGE_S:
        return f"expired: signed {int(age_s)} s ago (limit {MAX_MESSAGE_AGE_S} s)"
    if age_s < -CLOCK_SKEW_S:
        return "signed in the future"
    return None


def verify_message(message: Any) -> bool:
    return message_rejection(message) is None


def _legacy_format_accepted(now_s: float) -> bool:
    until = (get_settings().ermis_queue_legacy_signatures_until or "").strip()
    if not until:
        return False
    try:
        parsed = datetime.fromisoformat(until)
    except ValueError:
        return False
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp() > now_s
