"""Vercel's file routing for Python functions, as one table used by the dev server and tests.

Rules (Vercel's, for files under ``api/``):

- a file's path is its URL path with ``.py`` dropped: ``api/admin/flags.py`` → ``/api/admin/flags``;
- ``index.py`` serves its folder: ``api/feed/index.py`` → ``/api/feed`` (and ``/api/feed/index``);
- a ``[param]`` segment (folder or file) matches one path segment and names it:
  ``api/stories/[storyId]/events.py`` → ``/api/stories/{storyId}/events``;
- files and folders starting with ``_`` or ``.`` are not functions (private helpers);
- when several routes match, the one with more static segments earlier wins
  (``/api/stories/latest`` beats ``/api/stories/[storyId]``).

A function receives the original path; matched dynamic segments are also added to the query
string, as Vercel does. The deployment stage compares this router with the routes
``vercel build`` writes (``tests/deploy/test_build_output.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_PARAM = re.compile(r"^\[([A-Za-z_][A-Za-z0-9_]*)\]$")


@dataclass(frozen=True)
class FunctionRoute:
    file: str  # relative to the project root, e.g. "api/stories/[storyId]/events.py"
    pattern: str  # Starlette-style path, e.g. "/api/stories/{storyId}/events"
    segments: tuple[str, ...] = field(repr=False)  # "" marks a dynamic segment
    params: tuple[str, ...] = field(repr=False)
    is_index: bool = field(default=False, repr=False)

    def match(self, path: str) -> dict[str, str] | None:
        parts = split_path(path)
        if self.is_index and parts and parts[-1] == "index":
            parts = parts[:-1]
        if len(parts) != len(self.segments):
            return None
        values: dict[str, str] = {}
        names = iter(self.params)
        for part, segment in zip(parts, self.segments, strict=True):
            if segment == "":
                values[next(names)] = part
            elif part != segment:
                return None
        return values

    @property
    def specificity(self) -> tuple[int, ...]:
        # Static segments sort before dynamic ones, position by position.
        return tuple(0 if segment else 1 for segment in self.segments)


def split_path(path: str) -> list[str]:
    return [part for part in path.strip("/").split("/") if part != ""]


def route_for_file(relative_file: str) -> FunctionRoute:
    parts = Path(relative_file).with_suffix("").parts
    is_index = bool(parts) and parts[-1] == "index"
    if is_index:
        parts = parts[:-1]
    segments: list[str] = []
    params: list[str] = []
    pattern_parts: list[str] = []
    for part in parts:
        param = _PARAM.match(part)
        if param:
            segments.append("")
            params.append(param.group(1))
            pattern_parts.append("{" + param.group(1) + "}")
        else:
            segments.append(part)
            pattern_parts.append(part)
    return FunctionRoute(
        file=relative_file,
        pattern="/" + "/".join(pattern_parts),
        segments=tuple(segments),
        params=tuple(params),
        is_index=is_index,
    )


def is_function_file(relative_file: Path) -> bool:
    return relative_file.suffix == ".py" and not any(part.startswith(("_", ".")) for part in relative_file.parts)


def discover_routes(project_root: Path) -> list[FunctionRoute]:
    """Every function under ``api/``, most specific first; duplicate paths are an error."""
    api_dir = project_root / "api"
    routes: list[FunctionRoute] = []
    seen: dict[str, str] = {}
    for file in sorted(api_dir.rglob("*.py")):
        relative = file.relative_to(project_root)
        if not is_function_file(relative.relative_to("api")):
            continue
        found = route_for_file(relative.as_posix())
        if found.pattern in seen:
            raise ValueError(f"{found.file} and {seen[found.pattern]} both serve {found.pattern}")
        seen[found.pattern] = found.file
        routes.append(found)
    return sorted(routes, key=lambda r: (r.specificity, r.pattern))


def resolve(routes: list[FunctionRoute], path: str) -> tuple[FunctionRoute, dict[str, str]] | None:
    for candidate in routes:
        params = candidate.match(path)
        if params is not None:
            return candidate, params
    return None
