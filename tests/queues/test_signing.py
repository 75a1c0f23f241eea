"""lib.queues.signing: the spec's byte form, cross-checked with the spec's algorithm run in
Node.js, constant-time verification with key rotation, and failing closed."""

from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.contracts.json_stringify import UnrepresentableValue
from lib.local.paths import PROJECT_ROOT
from lib.queues.signing import (
    SigningSecretMissing,
    message_rejection,
    sign_message,
    signature_for,
    signing_input,
    verify_message,
)
from tests.support.node_signing import NodeSigner, node_vectors

SECRET = "queue-secret-for-tests"
MESSAGE = {"sourceId": "all-sources", "feedUrl": "", "batchId": "b-1", "requestedAt": "2026-12-02T10:00:00.000Z"}


def as_json_text(message: dict) -> str:
    # ASCII escapes carry lone surrogates; repr-exact floats carry every double to Node unchanged.
    return json.dumps(message, ensure_ascii=True)


def test_the_byte_form_is_written_down() -> None:
    assert signing_input({"b": 1, "a": "x", "signature": "ignored"}) == b'[["a","x"],["b",1]]'
    assert (
        signing_input({"é": 'ünï\n"q"', "n": None, "t": True})
        == '[["n",null],["t",true],["é","ünï\\n\\"q\\""]]'.encode()
    )
    assert signing_input({"ratio": 1e-7, "share": 0.00001, "delta": -3.0, "zero": -0.0}) == (
        b'[["delta",-3],["ratio",1e-7],["share",0.00001],["zero",0]]'
    )


VECTORS_FILE = PROJECT_ROOT / "contracts" / "queue-signing-vectors.json"


def load_vectors() -> dict:
    return json.loads(VECTORS_FILE.read_text(encoding="utf-8"))


def test_the_published_vectors_are_what_the_typescript_rule_writes_now() -> None:
    assert node_vectors() == VECTORS_FILE.read_text(encoding="utf-8"), (
        "contracts/queue-signing-vectors.json is stale: node contracts/queue-signing.mjs vectors > it"
    )
    classes = {vector["class"] for vector in load_vectors()["vectors"]}
    assert {"floats: exponent form", "floats: integral", "floats: negative zero", "strings: lone surrogates"} <= classes


def test_python_signs_every_vector_as_the_typescript_rule_does(set_env) -> None:
    vectors = load_vectors()
    set_env(ERMIS_QUEUE_SIGNING_SECRET=vectors["secret"], ERMIS_QUEUE_LEGACY_SIGNATURES_UNTIL=None)
    for vector in vectors["vectors"]:
        message = json.loads(vector["message"])
        assert signing_input(message) == vector["signingInput"].encode(), vector["class"]
        assert signature_for(message, vectors["secret"]) == vector["signature"], vector["class"]
        if "signedAt" in message:  # a whole message as producers send it: it verifies as delivered
            delivered = {**message, "signature": vector["signature"]}
            assert message_rejection(delivered, now_s=message["signedAt"] / 1000) is None


def test_the_typescript_rule_verifies_what_python_signs(node_signer: NodeSigner) -> None:
    vectors = load_vectors()
    for vector in vectors["vectors"]:
        python_signature = signature_for(json.loads(vector["message"]), vectors["secret"])
        answer = node_signer.sign(vectors["secret"], vector["message"], python_signature)
        assert answer["verified"] is True, vector["class"]
        tampered = node_signer.sign(vectors["secret"], vector["message"], python_signature[:-1] + "0")
        assert tampered["verified"] is (python_signature[-1] == "0"), vector["class"]


def test_every_refused_vector_is_refused_naming_its_field(set_env) -> None:
    vectors = load_vectors()
    set_env(ERMIS_QUEUE_SIGNING_SECRET=vectors["secret"])
    for vector in vectors["refused"]:
        message = json.loads(vector["message"])  # Python's json reads NaN and Infinity
        with pytest.raises(UnrepresentableValue) as refused:
            sign_message(message)
        assert refused.value.field == vector["field"], vector["class"]
        delivered = {**message, "signedAt": int(time.time() * 1000), "signature": "0" * 64}
        assert message_rejection(delivered) == f"unrepresentable value: {refused.value}"


TRICKY_CHARACTERS = [
    "\ud800",
    "\udc00",
    "\ud83d",
    "\ude80",
    "\x00",
    "\x1f",
    "\x7f",
    "\u2028",
    '"',
    "\\",
    "😀",
    "\ue000",
]
json_text = st.lists(
    st.sampled_from(TRICKY_CHARACTERS) | st.characters(codec=None, exclude_categories=()), max_size=8
).map("".join)
json_key = json_text | st.sampled_from(["0", "1", "2", "10", "01", "-1", "1.5", "4294967294", "4294967295"])
json_number = (
    st.integers()
    | st.integers(-(2**53) - 2, 2**53 + 2)
    | st.floats()
    | st.floats(-1e-5, 1e-5)
    | st.sampled_from([1e-7, 1e-6, 1e21, 1e20, -0.0, -3.0, 5e-324, 0.1 + 0.2, 2.0**60])
)
json_value = st.recursive(
    st.none() | st.booleans() | json_number | json_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_key, inner, max_size=3),
    max_leaves=10,
)


def value_at(value: object, path: tuple) -> object:
    for part in path:
        value = value[part]  # type: ignore[index]
    return value


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(json_key, json_value, min_size=1, max_size=5))
def test_both_languages_write_identical_input_or_python_refuses_as_documented(
    node_signer: NodeSigner, message: dict
) -> None:
    try:
        ours = signing_input(message)
    except UnrepresentableValue as refused:
        bad = value_at(message, refused.path)
        assert (isinstance(bad, float) and not math.isfinite(bad)) or (
            isinstance(bad, int) and not isinstance(bad, bool) and abs(bad) > 2**53 - 1
        ), refused
        return
    theirs = node_signer.sign(SECRET, as_json_text(message))
    assert ours.decode() == theirs["signingInput"]
    assert signature_for(message, SECRET) == theirs["signature"]


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
