"""Changing the bundle's environment in a test: variables set or unset through a monkeypatch
(undone with it), and the settings re-read."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lib.settings import get_settings


def env_setter(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``set_env(NAME="value", OTHER=None)``: set or unset variables until the patch is undone."""

    def apply(**values: str | None) -> None:
        for name, value in values.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    return apply
