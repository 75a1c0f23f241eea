"""What a function's start loads (lib.lazy_imports, issue 23): each ``api/`` file imported in a
fresh interpreter loads Starlette and our own code, and nothing on its deny list; a request
refused at the gate loads no driver either; and the stand-in itself imports once, on first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lib.bundle import PROJECT_ROOT

API_FILES = sorted(path.relative_to(PROJECT_ROOT).as_posix() for path in (PROJECT_ROOT / "api").rglob("*.py"))
# Third-party packages a start may load: Starlette and what Starlette itself imports.
ALLOWED_AT_START = {"starlette", "anyio", "sniffio", "idna", "typing_extensions", "python_multipart", "multipart"}
# Loaded by no function at start (today the deny list is the same for every function: none
# needs any of these for every request); each is imported by the code that uses it, at first use.
DENIED_AT_START = {
    "pydantic",
    "pydantic_core",
    "psycopg",
    "psycopg_pool",
    "jwt",
    "cryptography",
    "croniter",
    "httpx",
    "vercel",
    "polar",
    "sentry_sdk",
    "feedparser",
    "boto3",
    "botocore",
    "redis",
    "upstash_redis",
    "sse_starlette",
    "uvicorn",
    "mangum",
}

_LOADED_AFTER = """
import json, runpy, sys
before = set(sys.modules)
namespace = runpy.run_path(sys.argv[1])
{after}
loaded = {{name.split(".")[0] for name in set(sys.modules) - before}}
print(json.dumps(sorted(loaded - set(sys.stdlib_module_names))))
"""


def third_party_loaded(script: str, *args: str, env: dict[str, str] | None = None) -> set[str]:
    """Top-level non-stdlib modules ``script`` loads in a fresh interpreter, less our own."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT), **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.splitlines()[-1])
    # Private top-level names are extension internals (_cffi_backend...), named by their package.
    return {name for name in loaded if not name.startswith("_")} - {"lib", "api"}


@pytest.mark.parametrize("api_file", API_FILES)
def test_a_function_start_loads_only_starlette_and_our_code(api_file: str) -> None:
    loaded = third_party_loaded(_LOADED_AFTER.format(after=""), api_file)
    assert not loaded & DENIED_AT_START, f"{api_file} loads {sorted(loaded & DENIED_AT_START)} at start"
    assert loaded <= ALLOWED_AT_START, f"{api_file} loads {sorted(loaded - ALLOWED_AT_START)} at start: use lazy_import"


_REFUSED_REQUEST = """
import asyncio
async def call(app, path):
    sent = []
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"host", b"fn.example")], "scheme": "https", "server": ("fn.example", 443),
             "client": ("127.0.0.1", 1), "http_version": "1.1", "root_path": ""}
    await app(scope, receive, send)
    return sent[0]["status"]
status = asyncio.run(call(namespace["app"], sys.argv[2]))
assert status == 401, status
"""


@pytest.mark.parametrize(
    ("api_file", "path"),
    [
        ("api/feed/events.py", "/api/feed/events"),
        ("api/notifications/index.py", "/api/notifications"),
        ("api/admin/ai/metering/flush.py", "/api/admin/ai/metering/flush"),
        ("api/admin/rss/refresh.py", "/api/admin/rss/refresh"),
    ],
)
def test_a_request_refused_at_the_gate_loads_no_driver(api_file: str, path: str) -> None:
    """No session cookie or cron bearer: a 401 that pays for neither the database driver, JWT,
    pydantic, Redis nor the Polar SDK (the metering flush loads Polar only to flush)."""
    loaded = third_party_loaded(
        _LOADED_AFTER.format(after=_REFUSED_REQUEST), api_file, path, env={"CRON_SECRET": "s" * 32}
    )
    assert not loaded & DENIED_AT_START, f"a refused request to {api_file} loaded {sorted(loaded & DENIED_AT_START)}"


def test_the_stand_in_imports_its_module_once_on_first_use(tmp_path: Path) -> None:
    (tmp_path / "counted_module.py").write_text(
        "import builtins\nbuiltins.imports = getattr(builtins, 'imports', 0) + 1\nVALUE = 42\n"
    )
    script = (
        "import builtins, sys, threading\n"
        "from lib.lazy_imports import lazy_import\n"
        "counted = lazy_import('counted_module')\n"
        "assert 'counted_module' not in sys.modules and not hasattr(builtins, 'imports')\n"
        "assert 'not loaded yet' in repr(counted)\n"
        "seen = []\n"
        "threads = [threading.Thread(target=lambda: seen.append(counted.VALUE)) for _ in range(8)]\n"
        "[thread.start() for thread in threads]; [thread.join() for thread in threads]\n"
        "assert seen == [42] * 8 and builtins.imports == 1 and 'counted_module' in sys.modules\n"
        "assert counted.VALUE == 42 and builtins.imports == 1 and 'VALUE' in dir(counted)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{PROJECT_ROOT}:{tmp_path}"},
    )
    assert result.returncode == 0, result.stderr


def test_a_missing_module_fails_at_first_use_not_at_binding() -> None:
    from lib.lazy_imports import lazy_import

    missing = lazy_import("no_such_module_anywhere")
    with pytest.raises(ModuleNotFoundError):
        _ = missing.anything
