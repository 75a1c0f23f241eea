"""Where the local runtime keeps things: the project root, and the data directory
(``.data/`` unless ``ERMIS_DEV_DATA_DIR`` says otherwise) holding embedded databases, the
development key pair and the dev session file — which ``dev_session`` reads only while the dev
server that wrote it is still running (a file left by a stopped server is ignored)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lib.bundle import PROJECT_ROOT

__all__ = ["PROJECT_ROOT", "data_dir", "dev_key_dir", "dev_session", "session_file"]


def data_dir() -> Path:
    return Path(os.environ.get("ERMIS_DEV_DATA_DIR") or PROJECT_ROOT / ".data").resolve()


def session_file() -> Path:
    return data_dir() / "dev-session.json"


def dev_key_dir() -> Path:
    return data_dir() / "dev-keys"


def dev_session() -> dict[str, Any]:
    """The running dev server's session (URL, cron secret, database URL), or ``{}``."""
    try:
        session = json.loads(session_file().read_text())
        os.kill(int(session["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return session
