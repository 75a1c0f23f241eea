"""lib.queues.consumer_names against the SDK's own sanitiser, which mirrors Vercel's
``sanitizeConsumerName`` (the deployment stage also compares it with what ``vercel build``
writes). The SDK function is private, so it serves here as an oracle only."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from vercel.queue._internal.names import sanitize_name

from lib.queues.consumer_names import vercel_consumer_name


def test_the_contract_example() -> None:
    assert vercel_consumer_name("api/queues/rss/ingest.py") == "api_Squeues_Srss_Singest_Dpy"


@given(st.text(min_size=1, max_size=60))
def test_the_rule_is_the_sdks_for_any_file_name(name: str) -> None:
    assert vercel_consumer_name(name) == str(sanitize_name(name))


@given(st.lists(st.from_regex(r"\[?[A-Za-z0-9_.-]{1,12}\]?", fullmatch=True), min_size=1, max_size=5))
def test_function_paths_map_to_distinct_valid_names(segments: list[str]) -> None:
    file = "api/" + "/".join(segments) + ".py"
    assert vercel_consumer_name(file) == str(sanitize_name(file))
    assert vercel_consumer_name(file) != vercel_consumer_name(file.replace("/", "_", 1))
