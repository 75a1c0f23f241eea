"""Run bundle code in a child process, so a test can SIGKILL it mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from lib.local.paths import PROJECT_ROOT


@contextmanager
def bundle_process(async_call: str, module: str) -> Iterator[subprocess.Popen]:
    """``asyncio.run(<async_call>)`` after ``from <module> import *``, in a child with this
    test's environment; killed on exit if still alive."""
    code = f"import asyncio; from {module} import *; asyncio.run({async_call})"
    child = subprocess.Popen(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)


def sigkill(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
