"""lib.contracts.json_stringify: ECMAScript's JSON.stringify, compared with Node's own on
every double hypothesis can make, the documented examples, and the refusals naming the field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.contracts.json_stringify import UnrepresentableValue, json_stringify, number_to_string, quote_string
from tests.support.node_signing import NodeSigner


def node_stringify(node_signer: NodeSigner, value: object) -> str:
    # The signing input of {"v": value} is [["v",<JSON.stringify(value)>]].
    signing_input = node_signer.sign("unused", json.dumps({"v": value}))["signingInput"]
    return signing_input[len('[["v",') : -len("]]")]


@settings(max_examples=1000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.floats(-1e-5, 1e-5) | st.floats(1e15, 1e22))
def test_numbers_are_written_as_node_writes_them(node_signer: NodeSigner, value: float) -> None:
    assert number_to_string(value) == node_stringify(node_signer, value)


def test_the_documented_examples() -> None:
    assert [number_to_string(v) for v in (1e-7, 1e-6, 0.00001, -3.0, -0.0, 1e21, 1e20, 2.0**60)] == [
        "1e-7",
        "0.000001",
        "0.00001",
        "-3",
        "0",
        "1e+21",
        "100000000000000000000",
        "1152921504606847000",
    ]
    assert quote_string('\udc00 \ud800\udc00 \x01\n"\\\u2028') == '"\\udc00 𐀀 \\u0001\\n\\"\\\\\u2028"'
    assert json_stringify({"b": 1, "10": [1.5, None], "2": True, "a": {}}) == '{"2":true,"10":[1.5,null],"b":1,"a":{}}'


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"count": 2**53}, "count"),
        ({"stats": {"values": [1, -(2**64)]}}, "stats.values[1]"),
        ({"score": float("nan")}, "score"),
        ({"items": [{"ratio": float("inf")}]}, "items[0].ratio"),
        ({"when": {1, 2}}, "when"),
        ({"nested": {3: "x"}}, "nested"),
    ],
)
def test_what_javascript_cannot_hold_is_refused_naming_the_field(value: object, field: str) -> None:
    with pytest.raises(UnrepresentableValue) as refused:
        json_stringify(value)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ")
