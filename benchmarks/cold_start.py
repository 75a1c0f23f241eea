"""Cold start under Vercel's bootstrap: process start → ``server-started``, per built function,
next to a bare Starlette app built and booted the same way.

Both bundles are built by ``vercel build`` (the pinned CLI, as the deployment stage builds
them) and each function is started ``ROUNDS`` times exactly as the platform starts it
(``tests.support.vercel_bootstrap``: its files unpacked, a bare Python 3.12, an emptied
environment, ``VERCEL_IPC_PATH``). Reported: the median wall time from ``Popen`` to the IPC
``server-started`` message, the bootstrap's own ``userInitDuration`` (the import of the
function file), and each as a ratio to the bare app. The page cache is warm after the first
round, as on a warm Vercel host; the first round is dropped.

Run: ``.venv/bin/python -m benchmarks.cold_start`` (needs what ``./scripts/test`` installs).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from lib.bundle import PROJECT_ROOT
from tests.support.vercel_bootstrap import RunningFunction, bare_python312
from tests.support.vercel_build import BuildOutput, BuiltFunction, build_bundle, deploy_cache_dir

ROUNDS = 6
ENVIRONMENT = {"VERCEL": "1", "VERCEL_REGION": "arn1"}


def starlette_pin() -> str:
    return next(
        line for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines() if line.startswith("starlette==")
    )


def bare_starlette_project(root: Path) -> Path:
    (root / "api").mkdir(parents=True)
    (root / "api" / "bare.py").write_text("from starlette.applications import Starlette\n\napp = Starlette()\n")
    (root / "requirements.txt").write_text(starlette_pin() + "\n")
    (root / ".python-version").write_text((PROJECT_ROOT / ".python-version").read_text())
    return root


def boot_times(function: BuiltFunction, python: Path, scratch: Path) -> tuple[float, float]:
    """Median (wall seconds to server-started, userInitDuration ms) over the rounds after the first."""
    walls, imports = [], []
    for round_number in range(ROUNDS):
        task_dir = scratch / f"{function.name.replace('/', '_')}-{round_number}"
        with RunningFunction(function, task_dir, python, ENVIRONMENT) as running:
            if round_number:
                walls.append(running.boot_seconds)
                imports.append(running.server_started["userInitDuration"])
    return statistics.median(walls), statistics.median(imports)


def main() -> None:
    python = bare_python312(deploy_cache_dir() / "python3.12-bare")
    with tempfile.TemporaryDirectory(prefix="cold-start-") as scratch_name:
        scratch = Path(scratch_name)
        bundle: BuildOutput = build_bundle(PROJECT_ROOT, scratch / "bundle")
        bare: BuildOutput = build_bundle(bare_starlette_project(scratch / "bare-source"), scratch / "bare")
        bare_wall, bare_import = boot_times(bare.functions["api/bare"], python, scratch / "tasks")
        rows = [(name, *boot_times(function, python, scratch / "tasks")) for name, function in bundle.functions.items()]
    rows.sort(key=lambda row: row[1])
    print(f"{'function':<34} {'to server-started':>18} {'x bare':>7} {'import (runtime)':>17} {'x bare':>7}")
    print(f"{'bare Starlette app':<34} {bare_wall * 1000:>15.0f} ms {1:>7.2f} {bare_import:>14.0f} ms {1:>7.2f}")
    for name, wall, imported in rows:
        print(
            f"{name:<34} {wall * 1000:>15.0f} ms {wall / bare_wall:>7.2f}"
            f" {imported:>14.0f} ms {imported / max(bare_import, 1):>7.2f}"
        )


if __name__ == "__main__":
    main()
