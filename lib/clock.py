"""Time in the formats the contracts use: UTC, ISO 8601 with milliseconds and ``Z``, as
JavaScript's ``Date.prototype.toISOString`` writes it (the spec's responses)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso_timestamp(moment: datetime | None = None) -> str:
    moment = (moment or utc_now()).astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
