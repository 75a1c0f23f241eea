"""The cron secret every test function sees, and its bearer header."""

from __future__ import annotations

import secrets

TEST_CRON_SECRET = "test-cron-secret-" + secrets.token_hex(8)


def cron_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {TEST_CRON_SECRET}"}


def session_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
