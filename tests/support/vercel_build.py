"""``vercel build`` — Vercel's own CLI and Python builder — run on a copy of the tree, and its
Build Output read back.

The builder writes into the tree it builds (``pyproject.toml``, ``uv.lock``, ``.vercel/``), so
it always builds a copy: the files ``vercel deploy`` would upload, that is the tree less what
``.vercelignore`` excludes (``vercel build`` itself ignores that file; the upload applies it,
so a remote build never sees those files). The rules are applied by git, whose gitignore
matching ``.vercelignore`` follows. The copy gets a hand-made ``.vercel/project.json`` (no login, no
network to Vercel), and its uv cache is a link to ``.data/deploy/uv-cache`` so a second build
finds every wheel already downloaded. The CLI is the one ``scripts/_ensure_node_tools.sh``
installs (``ERMIS_VERCEL_CLI``); uv comes from ``.venv`` (``requirements-dev.txt``); Python 3.12
is whatever ``.python-version`` selects. A missing piece raises ``ToolchainMissing`` with one
line saying what and how to get it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from lib.bundle import PROJECT_ROOT

VERCEL_CLI_VERSION = "58.10.0"
UV_VERSION = "0.10.11"
PROJECT_JSON = {"projectId": "prj_local", "orgId": "team_local", "settings": {"framework": None}}
# Never part of "the tree": local state, caches and earlier builds.
NOT_THE_TREE = shutil.ignore_patterns(
    ".git", ".venv", ".data", ".vercel", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "test-output"
)
BUILD_TIMEOUT_S = 600


class ToolchainMissing(RuntimeError):
    """The deployment stage cannot run here; the message says what is missing, in one line."""


class BuildFailed(RuntimeError):
    pass


def deploy_cache_dir() -> Path:
    return PROJECT_ROOT / ".data" / "deploy"


def _vercel_cli() -> Path:
    default = PROJECT_ROOT / ".data" / "toolchain" / f"vercel-{VERCEL_CLI_VERSION}" / "node_modules" / ".bin" / "vercel"
    cli = Path(os.environ.get("ERMIS_VERCEL_CLI") or default)
    if not os.access(cli, os.X_OK):
        raise ToolchainMissing(
            f"the Vercel CLI is missing ({cli}): run ./scripts/test, which installs vercel@{VERCEL_CLI_VERSION} "
            "from npm (needs node and npm)"
        )
    if shutil.which("node") is None:
        raise ToolchainMissing("node is missing: apt-get install nodejs npm")
    return cli


def _uv_dir() -> Path:
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        raise ToolchainMissing(f"uv is missing from {uv.parent}: pip install uv=={UV_VERSION} (requirements-dev.txt)")
    return uv.parent


def python312() -> Path:
    """A Python 3.12 interpreter's executable, as ``.python-version`` selects it (pyenv), or on PATH."""
    candidates = [
        [str(PROJECT_ROOT / ".venv" / "bin" / "python"), "-c", "import sys; print(sys._base_executable)"],
        ["python3.12", "-c", "import sys; print(sys.executable)"],
    ]
    for command in candidates:
        try:
            found = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        executable = Path(found.stdout.strip())
        version = subprocess.run(
            [executable, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"], capture_output=True, text=True
        )
        if version.stdout.strip() == "True":
            return executable
    raise ToolchainMissing("Python 3.12 is missing (Vercel's builder and runtime need it): pyenv install 3.12")


def upload_copy(source: Path, destination: Path) -> Path:
    """The tree as ``vercel deploy`` uploads it: without what ``.vercelignore`` names."""
    shutil.copytree(source, destination, ignore=NOT_THE_TREE, symlinks=True)
    if (destination / ".vercelignore").exists():
        subprocess.run(["git", "init", "-q"], cwd=destination, check=True)
        ignored = subprocess.run(
            ["git", "ls-files", "-z", "--others", "--ignored", "--exclude-from=.vercelignore"],
            cwd=destination,
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
        for relative in filter(None, ignored):
            (destination / os.fsdecode(relative)).unlink()
        shutil.rmtree(destination / ".git")
    return destination


def declared_build_env(project: Path) -> dict[str, str]:
    """``vercel.json``'s ``build.env``: what ``vercel deploy`` sends as the remote build's
    environment (the CLI's deploy command reads ``localConfig.build.env``), and what ``vercel
    build`` on its own does not read — so the deployment stage passes it, as the platform would."""
    config_path = project / "vercel.json"
    if not config_path.exists():
        return {}
    return {
        str(key): str(value)
        for key, value in json.loads(config_path.read_text()).get("build", {}).get("env", {}).items()
    }


def run_vercel_build(project: Path, build_env: dict[str, str] | None = None) -> str:
    """``vercel build --yes`` in ``project`` (a copy), with the project's declared build
    environment (``declared_build_env``) and then ``build_env`` over it; returns the CLI's output."""
    cli, uv_dir, python = _vercel_cli(), _uv_dir(), python312()
    (project / ".vercel").mkdir(exist_ok=True)
    (project / ".vercel" / "project.json").write_text(json.dumps(PROJECT_JSON))
    uv_cache = deploy_cache_dir() / "uv-cache"
    uv_cache.mkdir(parents=True, exist_ok=True)
    (project / ".vercel" / "python" / "cache").mkdir(parents=True, exist_ok=True)
    (project / ".vercel" / "python" / "cache" / "uv").symlink_to(uv_cache, target_is_directory=True)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(uv_dir), str(python.parent), os.environ.get("PATH", "")]),
        "VERCEL_TELEMETRY_DISABLED": "1",
        **declared_build_env(project),
        **(build_env or {}),
    }
    for variable in ("VIRTUAL_ENV", "PYTHONPATH", "UV_CACHE_DIR"):
        env.pop(variable, None)
    result = subprocess.run(
        [str(cli), "build", "--yes"], cwd=project, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise BuildFailed(f"vercel build exited {result.returncode}:\n{output}")
    return output


@dataclass(frozen=True)
class BuiltFunction:
    """One ``.func`` directory of the Build Output (``api/feed/events`` for ``api/feed/events.py``)."""

    name: str
    directory: Path
    project: Path  # the built copy, which ``filePathMap`` paths are relative to

    @cached_property
    def config(self) -> dict[str, Any]:
        return json.loads((self.directory / ".vc-config.json").read_text())

    @property
    def file_path_map(self) -> dict[str, str]:
        return self.config.get("filePathMap", {})

    @property
    def source_file(self) -> str:
        return self.name + ".py"

    def vendored_distributions(self) -> set[str]:
        """Normalised ``name==version`` of every distribution under ``_vendor/``."""
        found = set()
        for path in self.file_path_map:
            parts = path.split("/")
            if len(parts) == 3 and parts[0] == "_vendor" and parts[1].endswith(".dist-info") and parts[2] == "METADATA":
                name, version = parts[1].removesuffix(".dist-info").rsplit("-", 1)
                found.add(f"{normalise_distribution(name)}=={version}")
        return found


def normalise_distribution(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


@dataclass(frozen=True)
class BuildOutput:
    project: Path
    log: str

    @property
    def output_dir(self) -> Path:
        return self.project / ".vercel" / "output"

    @cached_property
    def config(self) -> dict[str, Any]:
        return json.loads((self.output_dir / "config.json").read_text())

    @cached_property
    def functions(self) -> dict[str, BuiltFunction]:
        root = self.output_dir / "functions"
        return {
            directory.relative_to(root).as_posix().removesuffix(".func"): BuiltFunction(
                directory.relative_to(root).as_posix().removesuffix(".func"), directory, self.project
            )
            for directory in sorted(root.rglob("*.func"))
        }

    def function_for_file(self, file: str) -> BuiltFunction:
        return self.functions[file.removesuffix(".py")]


def build_bundle(source: Path, workdir: Path, build_env: dict[str, str] | None = None) -> BuildOutput:
    """Copy ``source`` to ``workdir`` and build it as Vercel would."""
    project = upload_copy(source, workdir)
    return BuildOutput(project, run_vercel_build(project, build_env))
