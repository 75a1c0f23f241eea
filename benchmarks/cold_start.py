"""Cold start under Vercel's bootstrap: process start → ``server-started``, per built function,
next to a bare Starlette app built and booted the same way — with Vercel's default build, and
with the builder's bytecode precompilation (``VERCEL_PYTHON_COMPILEALL=1`` in the project's
build environment).

Each bundle is built by ``vercel build`` (the pinned CLI, as the deployment stage builds it)
and each function is started ``ROUNDS`` times exactly as the platform starts it
(``tests.support.vercel_bootstrap``: its files unpacked, a bare Python 3.12, an emptied
environment, ``VERCEL_IPC_PATH``). Reported: the median wall time from ``Popen`` to the IPC
``server-started`` message, and its ratio to the bare app built the same way. The first round
warms the page cache (as on a warm Vercel host) and is dropped.

Run: ``.venv/bin/python -m benchmarks.cold_start`` (needs what ``./scripts/test`` installs).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from lib.bundle import PROJECT_ROOT
from tests.support.vercel_bootstrap import RunningFunction, bare_python312
from tests.support.vercel_build import BuiltFunction, build_bundle, deploy_cache_dir

ROUNDS = 4
ENVIRONMENT = {"VERCEL": "1", "VERCEL_REGION": "arn1"}
BUILDS = {"default build": {}, "VERCEL_PYTHON_COMPILEALL=1": {"VERCEL_PYTHON_COMPILEALL": "1"}}


def bare_starlette_project(root: Path) -> Path:
    pin = next(
        line for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines() if line.startswith("starlette==")
    )
    (root / "api").mkdir(parents=True)
    (root / "api" / "bare.py").write_text("from starlette.applications import Starlette\n\napp = Starlette()\n")
    (root / "requirements.txt").write_text(pin + "\n")
    (root / ".python-version").write_text((PROJECT_ROOT / ".python-version").read_text())
    return root


def median_boot_seconds(function: BuiltFunction, python: Path, scratch: Path) -> float:
    walls = []
    for round_number in range(ROUNDS):
        task_dir = scratch / f"{function.name.replace('/', '_')}-{round_number}"
        with RunningFunction(function, task_dir, python, ENVIRONMENT) as running:
            if round_number:
                walls.append(running.boot_seconds)
    return statistics.median(walls)


def main() -> None:
    python = bare_python312(deploy_cache_dir() / "python3.12-bare")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="cold-start-") as scratch_name:
        scratch = Path(scratch_name)
        bare_source = bare_starlette_project(scratch / "bare-source")
        for index, (label, build_env) in enumerate(BUILDS.items()):
            bare = build_bundle(bare_source, scratch / f"bare-{index}", build_env)
            bundle = build_bundle(PROJECT_ROOT, scratch / f"bundle-{index}", build_env)
            tasks = scratch / f"tasks-{index}"
            results[label] = {"bare Starlette app": median_boot_seconds(bare.functions["api/bare"], python, tasks)}
            for name, function in bundle.functions.items():
                results[label][name] = median_boot_seconds(function, python, tasks)
    labels = list(BUILDS)
    header = f"| function | {' | '.join(f'{label} | x bare' for label in labels)} |"
    print(header)
    print("|---" * (1 + 2 * len(labels)) + "|")
    default = results[labels[0]]
    for name in sorted(default, key=lambda name: (name != "bare Starlette app", default[name])):
        cells = []
        for label in labels:
            seconds, bare_seconds = results[label][name], results[label]["bare Starlette app"]
            cells.append(f"{seconds * 1000:,.0f} ms | {seconds / bare_seconds:.2f}")
        print(f"| `{name}` | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
