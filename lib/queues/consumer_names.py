"""Consumer names as Vercel gives them (CONTRACTS §5).

A function with a ``queue/v2beta`` trigger consumes its topic as a consumer group named after
the function's file: ``vercel build`` writes ``"consumer": "api_Squeues_Srss_Singest_Dpy"``
for ``api/queues/rss/ingest.py`` into the function's ``.vc-config.json``, and the queue
service pushes each delivery with that name in ``ce-vqsconsumergroup``. The SDK finds a
subscriber by (topic, consumer group), so a consumer subscribed under any other name answers
every real push with "no subscribers".

The rule is ``sanitizeConsumerName`` of Vercel's build utilities (mirrored by the SDK's name
sanitiser): ASCII letters, digits and ``-`` stay; ``_`` → ``__``, ``.`` → ``_D``, ``/`` →
``_S``; any other character → ``_`` and its code point as two or more upper-case hex digits.
``tests/queues/test_consumer_names.py`` holds it to the SDK's sanitiser and the deployment
stage to the names ``vercel build`` writes.
"""

from __future__ import annotations

_ESCAPES = {"_": "__", ".": "_D", "/": "_S"}


def vercel_consumer_name(function_file: str) -> str:
    """``api/queues/rss/ingest.py`` → ``api_Squeues_Srss_Singest_Dpy``."""
    if not function_file:
        raise ValueError("a consumer name needs a function file")
    return "".join(
        _ESCAPES.get(char) or (char if char.isascii() and (char.isalnum() or char == "-") else f"_{ord(char):02X}")
        for char in function_file
    )
