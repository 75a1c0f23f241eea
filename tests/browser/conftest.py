"""One Chromium per browser test module. Not per session: Playwright's sync API runs an event
loop on the main thread while it is open, which the async tests of later modules need."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.support.browser import chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched
