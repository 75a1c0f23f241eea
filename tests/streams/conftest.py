"""Fixtures of the stream tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def safety_net_out_of_the_way(set_env) -> None:
    """A safety-net tick once a day: a wait that ends was ended by a change or a poll. (A minute's
    tick, aligned to the clock, fell inside a test's one-second wait about once in sixty runs
    and woke a stream nothing had changed for.) Tests of the tick set their own."""
    set_env(ERMIS_SSE_SAFETY_POLL_S="86400")


@pytest.fixture
def slow_polls(set_env) -> None:
    """Polls far slower than any test: a frame that arrives was pushed."""
    set_env(ERMIS_SSE_POLL_INTERVAL_MS="20000", ERMIS_SSE_MAX_DURATION_S="4")
