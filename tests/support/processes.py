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
    code = (
        f"import asyncio\nfrom {module} import *\nfrom lib.db.pool import close_pools\n"
        f"from lib.runtime.after_response import wait_for_detached_work\n"
        f"async def main():\n    await {async_call}\n    await wait_for_detached_work()\n    await close_pools()\n"
        "asyncio.run(main())"
    )
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
