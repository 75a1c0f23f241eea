"""Time in the formats the contracts use — UTC, ISO 8601 with milliseconds and ``Z``, as
JavaScript's ``Date.prototype.toISOString`` writes it (the spec's responses) — and deadlines
on the monotonic clock for work that must end before its function's ``maxDuration``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso_timestamp(moment: datetime | None = None) -> str:
    moment = (moment or utc_now()).astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Deadline:
    """A moment on the monotonic clock that some work must finish by."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def earlier_by(self, seconds: float) -> Deadline:
        return Deadline(self.at - seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def passed(self) -> bool:
        return self.remaining() <= 0
