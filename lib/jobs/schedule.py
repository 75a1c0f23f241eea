"""The cron table: ``vercel.json``'s ``crons``, read once, with each job's name.

A job's name is its path after ``/api/admin/`` with ``/`` as ``-`` (``state-cleanup``). It is
the Sentry monitor slug of its check-ins and the name ``scripts/cron`` takes. The schedule is the
five-field UTC expression Vercel runs it on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lib.bundle import PROJECT_ROOT, read_vercel_config
from lib.lazy_imports import lazy_import

croniter = lazy_import("croniter")

CRON_PATH_PREFIX = "/api/admin/"


@dataclass(frozen=True)
class CronEntry:
    path: str
    schedule: str

    @property
    def name(self) -> str:
        return cron_name(self.path)


def cron_name(path: str) -> str:
    return path.removeprefix(CRON_PATH_PREFIX).strip("/").replace("/", "-")


def load_crons(project_root: Path = PROJECT_ROOT) -> list[CronEntry]:
    config = read_vercel_config(project_root)
    entries = [CronEntry(item["path"], item["schedule"]) for item in config.get("crons", [])]
    for entry in entries:
        if not croniter.croniter.is_valid(entry.schedule):
            raise ValueError(f"invalid cron schedule {entry.schedule!r} for {entry.path}")
    return entries


@lru_cache(maxsize=1)
def deployed_schedules() -> dict[str, str]:
    """path → schedule of the bundle's own ``vercel.json``; empty if it is not deployed with it."""
    try:
        return {entry.path: entry.schedule for entry in load_crons()}
    except (OSError, ValueError):
        return {}


def find_cron(entries: list[CronEntry], name_or_path: str) -> CronEntry | None:
    for entry in entries:
        if name_or_path in (entry.name, entry.path):
            return entry
    return None
