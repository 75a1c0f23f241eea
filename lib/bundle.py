"""The bundle's own files: where the project root is and what ``vercel.json`` declares.

The root is the checkout locally and the function's task directory once Vercel (or Lambda)
has unpacked the bundle; both hold ``api/``, ``lib/`` and ``vercel.json`` side by side, so a
path relative to the root names the same file everywhere — which is how Vercel names a
function (``api/queues/rss/ingest.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def read_vercel_config(project_root: Path = PROJECT_ROOT) -> dict:
    return json.loads((project_root / "vercel.json").read_text())


def bundle_relative_path(module_file: str) -> str:
    """``/var/task/api/queues/rss/ingest.py`` → ``api/queues/rss/ingest.py`` (a relative path is
    taken as it is)."""
    path = Path(module_file)
    if not path.is_absolute():
        return path.as_posix()
    return path.resolve().relative_to(PROJECT_ROOT).as_posix()
