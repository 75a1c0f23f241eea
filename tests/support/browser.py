"""Debian's Chromium driven by Playwright (it cannot download its own browser here), and where
browser tests leave their screenshots (``test-output/``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Browser, Page, sync_playwright

from lib.local.paths import PROJECT_ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = PROJECT_ROOT / "test-output"


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def record_badge_changes(page: Page, test_id: str = "notifications-status") -> None:
    """From now on, every text the badge ``test_id`` shows is pushed to ``window.statuses``."""
    page.evaluate(
        """(testId) => {
          window.statuses = [];
          const badge = document.querySelector(`[data-testid="${testId}"]`);
          new MutationObserver(() => window.statuses.push(badge.textContent)).observe(badge, { childList: true });
        }""",
        test_id,
    )
