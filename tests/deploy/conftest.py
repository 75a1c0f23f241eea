"""The deployment stage's fixtures: one ``vercel build`` of the tree per run, and a bare Python
3.12 to boot its functions with. Where the stage cannot run (no CLI, no node, no 3.12), every
test of it fails with one line saying what is missing — it never skips."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from lib.bundle import PROJECT_ROOT
from tests.support.vercel_bootstrap import bare_python312
from tests.support.vercel_build import BuildOutput, ToolchainMissing, build_bundle, deploy_cache_dir

T = TypeVar("T")


def _or_fail_in_one_line(make: Callable[[], T]) -> T:
    try:
        return make()
    except ToolchainMissing as error:
        missing = str(error)
    pytest.fail(f"deployment stage cannot run: {missing}", pytrace=False)


@pytest.fixture(scope="session")
def vercel_output(tmp_path_factory: pytest.TempPathFactory) -> BuildOutput:
    return _or_fail_in_one_line(lambda: build_bundle(PROJECT_ROOT, tmp_path_factory.mktemp("deploy") / "project"))


@pytest.fixture(scope="session")
def runtime_python() -> Path:
    return _or_fail_in_one_line(lambda: bare_python312(deploy_cache_dir() / "python3.12-bare"))
