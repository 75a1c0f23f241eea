"""Changing the bundle's environment in a test: variables set or unset through a monkeypatch
(undone with it), and the settings re-read."""

from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from lib.settings import get_settings


def env_setter(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``set_env(NAME="value", OTHER=None)``: set or unset variables until the patch is undone.
    A variable unset here is restored to what it was before the test even when code set it
    meanwhile (a Lambda's cold start writes its secret's values into the environment)."""

    def apply(**values: str | None) -> None:
        for name, value in values.items():
            if value is None:
                monkeypatch.setenv(name, "")  # recorded, so the undo restores the original (absent: removed)
                monkeypatch.delenv(name)
            else:
                monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    return apply


def allow_egress(set_env: Callable[..., None], *urls: str) -> None:
    """Name test servers on loopback in ``ERMIS_EGRESS_ALLOW`` (``127.0.0.1:<port>`` each), as a
    deployment names its private destinations; what is already allowed stays."""
    entries = [entry for entry in os.environ.get("ERMIS_EGRESS_ALLOW", "").split(",") if entry]
    entries += [urlsplit(url).netloc for url in urls]
    set_env(ERMIS_EGRESS_ALLOW=",".join(entries))
