"""Run bundle code in a child process, so a test can SIGKILL it mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
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
    # The child's output goes to a file (a pipe could fill and stall it); read it with output_of().
    with tempfile.TemporaryFile("w+") as output:
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=PROJECT_ROOT,
            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        child.output = output  # type: ignore[attr-defined]
        try:
            yield child
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=30)


def output_of(child: subprocess.Popen) -> str:
    """Everything the child printed so far (for assertion messages)."""
    output = child.output  # type: ignore[attr-defined]
    output.flush()
    output.seek(0)
    return output.read()


def sigkill(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
