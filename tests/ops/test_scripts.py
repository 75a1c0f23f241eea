"""Every operator script fails in one line that says what is wrong and what to do — never a
traceback — and finds the database the same way: DATABASE_URL, else the running dev server's
(a session file left by a stopped server is ignored)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from lib.local.paths import PROJECT_ROOT

SCRIPTS = [("erasure", "list"), ("seed",), ("migrate",), ("pipeline", "status"), ("cron", "state-cleanup")]


def run(script: tuple[str, ...], data_dir: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "CRON_SECRET")}
    environment.update(ERMIS_DEV_DATA_DIR=str(data_dir), ERMIS_DEV_URL="http://127.0.0.1:9", **env)
    return subprocess.run(
        [str(PROJECT_ROOT / "scripts" / script[0]), *script[1:]],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_clear_line(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode in (1, 2), result
    assert "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and all(part in line for part in expected), line


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script[0])
def test_with_no_database_and_a_dev_session_left_by_a_stopped_server(script: tuple[str, ...], tmp_path: Path) -> None:
    dead_pid = 2**22 + 7  # above Linux's largest pid: no process has it
    (tmp_path / "dev-session.json").write_text(
        json.dumps({"pid": dead_pid, "url": "http://127.0.0.1:9", "databaseUrl": "postgresql://127.0.0.1:9/x"})
    )
    result = run(script, tmp_path)
    if script[0] in ("pipeline", "cron"):  # they talk to the server, not the database
        assert_one_clear_line(result, "scripts/dev")
    else:
        assert_one_clear_line(result, "DATABASE_URL is not set", "start scripts/dev")


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s[0] in ("erasure", "seed", "migrate")], ids=lambda s: s[0])
def test_with_an_unreachable_database(script: tuple[str, ...], tmp_path: Path) -> None:
    result = run(script, tmp_path, DATABASE_URL="postgresql://postgres@127.0.0.1:9/nothing?connect_timeout=2")
    assert_one_clear_line(result, "cannot reach the database")
