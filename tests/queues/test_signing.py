"""lib.queues.signing: the spec's byte form, cross-checked with the spec's algorithm run in
Node.js, constant-time verification with key rotation, and failing closed."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.queues.signing import (
    SigningSecretMissing,
    message_rejection,
    sign_message,
    signature_for,
    signing_input,
    verify_message,
)

SECRET = "queue-secret-for-tests"
MESSAGE = {"sourceId": "all-sources", "feedUrl": "", "batchId": "b-1", "requestedAt": "2026-12-02T10:00:00.000Z"}

# The spec's JavaScript, verbatim in spirit: entries without `signature`, sorted by key,
# JSON.stringify'd, HMAC-SHA256 hex.
NODE_SIGNER = """
const crypto = require('crypto');
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = input.messages.map((m) => {
  const entries = Object.entries(m).filter(([k]) => k !== 'signature').sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const canonical = JSON.stringify(entries);
  return { canonical, signature: crypto.createHmac('sha256', input.secret).update(canonical).digest('hex') };
});
process.stdout.write(JSON.stringify(out));
"""


def node_signatures(messages: list[dict]) -> list[dict]:
    result = subprocess.run(
        ["node", "-e", NODE_SIGNER],
        input=json.dumps({"secret": SECRET, "messages": messages}),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return json.loads(result.stdout)


def test_the_byte_form_is_written_down() -> None:
    assert signing_input({"b": 1, "a": "x", "signature": "ignored"}) == b'[["a","x"],["b",1]]'
    assert (
        signing_input({"é": 'ünï\n"q"', "n": None, "t": True})
        == '[["n",null],["t",true],["é","ünï\\n\\"q\\""]]'.encode()
    )


VECTORS = [
    MESSAGE,
    {"z": 1, "a": [1, 2, {"k": "v"}], "m": None, "signature": "x" * 64},
    {"text": 'Ελληνικά — ünïcode ✓ \u2028 tab\t quote" backslash\\ ctrl\x01', "count": -42, "ok": False},
    {"nested": {"b": 2, "a": 1, "10": "ten", "2": "two", "": "blank"}, "empty": "", "list": []},
    {"\ue000": None, "\U00010000": None},  # JavaScript sorts by UTF-16 code units: the astral key first
]


def test_python_and_the_spec_javascript_agree_on_fixed_vectors() -> None:
    for vector, node in zip(VECTORS, node_signatures(VECTORS), strict=True):
        assert signing_input(vector).decode() == node["canonical"]
        assert signature_for(vector, SECRET) == node["signature"]


json_leaf = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=20)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=8), json_value, max_size=5), min_size=1, max_size=5))
def test_python_and_javascript_agree_on_generated_messages(messages: list[dict]) -> None:
    try:
        for message in messages:
            signing_input(message)
    except (UnicodeEncodeError, ValueError):
        return  # lone surrogates cannot be sent as UTF-8 JSON by either side
    for message, node in zip(messages, node_signatures(messages), strict=True):
        assert signature_for(message, SECRET) == node["signature"]


def test_sign_then_verify_and_every_forgery_fails(set_env) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET=SECRET)
    signed = sign_message(MESSAGE)
    assert verify_message(signed)
    good = signed["signature"]
    forgeries = [
        {k: v for k, v in signed.items() if k != "signature"},
        {**signed, "signature": "0" * 64},
        {**signed, "signature": good[:-1]},
        {**signed, "signature": good + "0"},
        {**signed, "signature": good.upper()},
        {**signed, "signature": "z" * 64},
        {**signed, "batchId": "b-2"},
        {**sign_message({**MESSAGE, "batchId": "other"}), "batchId": "b-1"},
        {**signed, "signature": 12345},
        "not a dict",
    ]
    assert [verify_message(forgery) for forgery in forgeries] == [False] * len(forgeries)


def test_rotation_accepts_the_next_key(set_env) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET="old-key")
    signed_with_old = sign_message(MESSAGE)
    set_env(ERMIS_QUEUE_SIGNING_SECRET="new-key", ERMIS_QUEUE_SIGNING_SECRET_NEXT="old-key")
    assert verify_message(signed_with_old)
    assert verify_message(sign_message(MESSAGE))
    set_env(ERMIS_QUEUE_SIGNING_SECRET_NEXT=None)
    assert not verify_message(signed_with_old)


def test_no_secret_fails_closed(set_env) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET=SECRET)
    signed = sign_message(MESSAGE)
    set_env(ERMIS_QUEUE_SIGNING_SECRET=None, ERMIS_QUEUE_SIGNING_SECRET_NEXT=None)
    assert not verify_message(signed)
    with pytest.raises(SigningSecretMissing):
        sign_message(MESSAGE)


def test_the_signing_time_is_inside_the_signature(set_env) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET=SECRET, ERMIS_QUEUE_LEGACY_SIGNATURES_UNTIL=None)
    signed = sign_message(MESSAGE)
    assert isinstance(signed["signedAt"], int) and verify_message(signed)
    assert not verify_message({**signed, "signedAt": signed["signedAt"] + 1})  # a refreshed time is a forgery


def test_messages_older_than_the_retention_or_from_the_future_are_refused(set_env) -> None:
    set_env(ERMIS_QUEUE_SIGNING_SECRET=SECRET)
    now = time.time()
    day = 24 * 3600 * 1000
    assert message_rejection(sign_message(MESSAGE, signed_at_ms=int(now * 1000) - day + 60_000), now) is None
    assert message_rejection(sign_message(MESSAGE, signed_at_ms=int(now * 1000) - day - 301_000), now).startswith(
        "expired"
    )
    assert message_rejection(sign_message(MESSAGE, signed_at_ms=int(now * 1000) + 301_000), now) == (
        "signed in the future"
    )
    assert message_rejection({**MESSAGE, "signedAt": "yesterday", "signature": "0" * 64}, now) == "invalid signature"


def test_the_previous_format_verifies_only_inside_the_rollout_window(set_env) -> None:
    legacy = {**MESSAGE, "signature": signature_for(MESSAGE, SECRET)}  # what producers signed before signedAt
    set_env(ERMIS_QUEUE_SIGNING_SECRET=SECRET, ERMIS_QUEUE_LEGACY_SIGNATURES_UNTIL=None)
    assert message_rejection(legacy) == "previous format (no signedAt) outside the rollout window"
    set_env(ERMIS_QUEUE_LEGACY_SIGNATURES_UNTIL="2999-01-01T00:00:00Z")
    assert verify_message(legacy)
    set_env(ERMIS_QUEUE_LEGACY_SIGNATURES_UNTIL="2000-01-01T00:00:00")
    assert not verify_message(legacy)
