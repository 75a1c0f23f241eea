"""ECMAScript's ``JSON.stringify``, for every value JSON can carry: the text a JavaScript
producer writes, byte for byte, so that a signature made on one side verifies on the other
(``lib.queues.signing``) and a key derived from the text is the same key.

References (ECMA-262, 2024): ``JSON.stringify`` is §25.5.2 — SerializeJSONProperty writes
``null``/``true``/``false``, numbers by Number::toString (§6.1.6.1.20), strings by
QuoteJSONString (§25.5.2.3), objects in the order EnumerableOwnProperties gives (§10.1.11.1
OrdinaryOwnPropertyKeys: array-index keys ascending, then the other string keys in insertion
order), arrays in order, and no whitespace.

- **Numbers.** Number::toString writes the fewest decimal digits ``s`` (k of them) that read
  back as the same double, with the decimal point after ``n`` of them: plain digits when
  ``-6 < n <= 21``, else ``d.ddde±x``. The digits are Python's ``repr(float)`` (the shortest
  round-trip digits, closest to the value, as ECMAScript requires); only the layout is done
  here — no library lays out numbers the ECMAScript way without also re-ordering objects
  (RFC 8785 sorts keys, which ``JSON.stringify`` does not). So ``1e-07`` → ``1e-7``,
  ``1e-05`` → ``0.00001``, ``-3.0`` → ``-3``, ``-0.0`` → ``0``.
- **Strings.** ``"`` and ``\\`` escaped, ``\\b \\f \\n \\r \\t`` short, every other code unit
  below U+0020 and every lone surrogate as ``\\uXXXX`` (lower-case hex); the rest written as it
  is (U+2028 included). A surrogate pair held as two code points is one character, as in
  JavaScript.
- **Refused** (``UnrepresentableValue``, naming the field): what JavaScript cannot hold exactly
  or ``JSON.stringify`` would write as something else — integers beyond ±(2**53-1) (JavaScript
  rounds them), ``NaN`` and the infinities (it writes ``null``), keys that are not strings, and
  values of any type but ``None``, ``bool``, ``int``, ``float``, ``str``, ``list``, ``tuple``
  and ``dict``.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1
_REPR = re.compile(r"^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TO_ESCAPE = re.compile('["\\\\\x00-\x1f\ud800-\udfff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ARRAY_INDEX_LIMIT = 2**32 - 1


Path = tuple[str | int, ...]


class UnrepresentableValue(ValueError):
    """A value ``JSON.stringify`` cannot write as the value it is; ``path`` is where it is (keys
    and indices), ``field`` the same written out (``score``, ``items[2].ratio``)."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
        self.problem = problem
        super().__init__(f"{self.field or 'the message'}: {problem}")


def number_to_string(value: float, path: Path = ()) -> str:
    """ECMAScript's Number::toString of a finite double."""
    if not math.isfinite(value):
        raise UnrepresentableValue(path, f"{value!r} is not a finite number (JSON.stringify writes null)")
    if value == 0:
        return "0"  # -0 included
    match = _REPR.match(repr(abs(value)))
    assert match is not None  # repr of a finite positive float always has this form
    whole, fraction, exponent = match[1], match[2] or "", int(match[3] or 0)
    # The value is 0.<whole><fraction> * 10^(len(whole) + exponent); leading zeros move the point.
    significant = (whole + fraction).lstrip("0")
    n = len(whole) + exponent - (len(whole) + len(fraction) - len(significant))
    digits = significant.rstrip("0")
    k = len(digits)
    sign = "-" if value < 0 else ""
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def quote_string(text: str) -> str:
    """ECMAScript's QuoteJSONString."""
    if _SURROGATE.search(text):
        # Two code points that form a surrogate pair are one character in JavaScript.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return '"' + _TO_ESCAPE.sub(lambda m: _SHORT_ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04x}", text) + '"'


def is_array_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and str(int(key)) == key and int(key) < _ARRAY_INDEX_LIMIT


def property_order(keys: list[str]) -> list[str]:
    """The order JavaScript enumerates an object's own string keys."""
    indices = sorted((key for key in keys if is_array_index(key)), key=int)
    return indices + [key for key in keys if not is_array_index(key)]


def utf16_order(key: str) -> bytes:
    """A sort key that orders strings as JavaScript's ``<`` does: by UTF-16 code units, so an
    astral character (``\\ud800…``) sorts before ``\\ue000``."""
    return key.encode("utf-16-be", "surrogatepass")


def json_stringify(value: Any, path: Path = ()) -> str:
    """What ``JSON.stringify(value)`` writes, or ``UnrepresentableValue`` naming the field."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return quote_string(value)
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise UnrepresentableValue(
                path, "an integer beyond ±(2**53-1), which JavaScript rounds; send it as a string"
            )
        return str(int(value))
    if isinstance(value, float):
        return number_to_string(value, path)
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_stringify(item, (*path, i)) for i, item in enumerate(value)) + "]"
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise UnrepresentableValue(path, f"key {key!r} is not a string")
        return (
            "{"
            + ",".join(
                quote_string(key) + ":" + json_stringify(value[key], (*path, key))
                for key in property_order(list(value))
            )
            + "}"
        )
    raise UnrepresentableValue(path, f"a {type(value).__name__} is not a JSON value")
