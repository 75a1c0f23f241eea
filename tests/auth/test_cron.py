"""lib.auth.cron: the cron bearer, compared in constant time, failing closed."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from lib.auth.cron import is_authorized_cron_request
from tests.support.auth import TEST_CRON_SECRET


def request_with_authorization(value: str | None) -> Request:
    headers = [] if value is None else [(b"authorization", value.encode())]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers, "query_string": b""})


def test_the_configured_bearer_is_authorized() -> None:
    assert is_authorized_cron_request(request_with_authorization(f"Bearer {TEST_CRON_SECRET}"))


@pytest.mark.parametrize(
    "presented",
    [
        None,
        "",
        "Bearer",
        f"Bearer {TEST_CRON_SECRET}x",
        f"Bearer {TEST_CRON_SECRET[:-1]}",
        f"bearer {TEST_CRON_SECRET}",
        f"Basic {TEST_CRON_SECRET}",
        TEST_CRON_SECRET,
    ],
    # Named by shape: the secret is random per process, and parallel workers must collect alike.
    ids=["absent", "empty", "bare-scheme", "suffixed", "truncated", "lowercase-scheme", "basic", "no-scheme"],
)
def test_anything_else_is_refused(presented: str | None) -> None:
    assert not is_authorized_cron_request(request_with_authorization(presented))


@pytest.mark.parametrize("configured", [None, "", "   "])
def test_missing_secret_authorizes_nothing(configured: str | None, set_env) -> None:
    set_env(CRON_SECRET=configured)
    assert not is_authorized_cron_request(request_with_authorization("Bearer "))
    assert not is_authorized_cron_request(request_with_authorization("Bearer    "))
    assert not is_authorized_cron_request(request_with_authorization("Bearer undefined"))
