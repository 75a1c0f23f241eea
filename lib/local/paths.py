"""Where the local runtime keeps things: the project root, and the data directory
(``.data/`` unless ``ERMIS_DEV_DATA_DIR`` says otherwise) holding embedded databases, the
development key pair and the dev session file."""

from __future__ import annotations

import os
from pathlib import Path

from lib.bundle import PROJECT_ROOT

__all__ = ["PROJECT_ROOT", "data_dir", "dev_key_dir", "session_file"]


def data_dir() -> Path:
    return Path(os.environ.get("ERMIS_DEV_DATA_DIR") or PROJECT_ROOT / ".data").resolve()


def session_file() -> Path:
    return data_dir() / "dev-session.json"


def dev_key_dir() -> Path:
    return data_dir() / "dev-keys"
