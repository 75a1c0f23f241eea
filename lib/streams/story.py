"""``/api/stories/<storyId>/events`` (spec: the story stream; ``maxDuration`` 300) and its
fallback ``/api/stories/<storyId>``. Gated by ``canEditStories``.

Connect: the story must be visible to the caller (its tenant, or any tenant for the
``super_admin`` bypass) — otherwise 404, which the client takes as "stop polling for good".
Then a ``story.phase`` snapshot (the stream's first read) ``{storyId, phase, status, updatedAt}``, and a new
``story.phase`` whenever phase or status changes. ``STREAM_MISS_LIMIT`` (3) consecutive
lookups that find nothing close the stream (a story deleted or moved away stops the loop).
Lookups never overlap: the loop awaits each before waiting again (the spec's ``pollInFlight``
guard, by construction). A lookup runs when the tenant's drafts change (``listener``, pushed;
the bypass watches every tenant), on the safety net, or every 5 s when push is unavailable;
lookups are shared per (tenant, story, read key).
Self-closes at 290 s, under the 300 s function cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.auth.roles import can_review_all_tenants
from lib.auth.sessions import Session
from lib.http.errors import ApiError
from lib.http.routing import dynamic_segment
from lib.lazy_imports import lazy_import
from lib.platform.editorial import find_story_draft
from lib.streams.limits import limited_stream
from lib.streams.listener import ANY
from lib.streams.shared_reads import SharedReads
from lib.streams.sse import RETRY_MS, keep_alive_frame, sse_frame
from lib.streams.watch import KEEP_ALIVE, ChangeWatch, stream_timing

stream_events = lazy_import("lib.contracts.stream_events")

STORY_POLL_INTERVAL_MS = 5000
STORY_MAX_DURATION_S = 290
STREAM_MISS_LIMIT = 3

shared_story_reads = SharedReads()


def _scope(session: Session) -> str | None:
    """The tenant to look in; ``None`` lets the platform bypass see every tenant."""
    return None if can_review_all_tenants(session.platform_role) else session.tenant_scope_id or ""


def _phase(draft: dict[str, Any]) -> dict[str, Any]:
    """The ``story.phase`` payload, through its contract."""
    return stream_events.StoryPhase.model_validate(
        {
            "storyId": draft["storyId"],
            "phase": draft["phase"],
            "status": draft["status"],
            "updatedAt": draft["updatedAt"],
        }
    ).model_dump()


def _frame(phase: dict[str, Any], retry: int | None = None) -> bytes | None:
    return sse_frame("story.phase", phase, f"{phase['updatedAt']}|{phase['phase']}|{phase['status']}", retry=retry)


async def story_frames(story_id: str, scope: str | None) -> AsyncIterator[bytes]:
    """The phase snapshot from the stream's own first read, then each change of phase or status.
    The first read is the stream's, not the request's: its read key is taken before it, so a
    change committed after it is read again (with the request's read, a change committed between
    that read and the stream's first wait was taken as read, and waited for the safety net)."""
    timing = stream_timing(STORY_POLL_INTERVAL_MS, STORY_MAX_DURATION_S)
    deadline = timing.deadline()
    last: dict[str, Any] | None = None
    misses = 0
    audience = ("drafts", ANY if scope is None else scope)
    watch = ChangeWatch(timing, (audience,))

    def start_read() -> asyncio.Future[dict[str, Any] | None]:
        return watch.start_shared(shared_story_reads, (scope, story_id), lambda: find_story_draft(story_id, scope))

    async with contextlib.aclosing(
        watch.reads(deadline, ("story", scope, story_id), start_read, "/api/stories/events", storyId=story_id)
    ) as reads:
        async for draft in reads:
            if draft is KEEP_ALIVE:
                yield keep_alive_frame()
                continue
            if draft is None:
                misses += 1
                if misses >= STREAM_MISS_LIMIT:
                    return
                continue
            misses = 0
            current = _phase(draft)
            if last is None or (current["phase"], current["status"]) != (last["phase"], last["status"]):
                if (frame := _frame(current, RETRY_MS if last is None else None)) is not None:
                    yield frame
                last = current


async def _visible_draft(request: Request) -> tuple[str, str | None, dict[str, Any]]:
    """The story's id, the caller's scope and the draft — or 404 when the caller may not see it."""
    session = require_session(request)
    story_id = dynamic_segment(request, "storyId")
    scope = _scope(session)
    draft = await find_story_draft(story_id, scope)
    if draft is None:
        raise ApiError(404, "story_not_found", f"No story {story_id} in your newsroom.")
    return story_id, scope, draft


async def story_events(request: Request) -> Response:
    story_id, scope, _ = await _visible_draft(request)
    return await limited_stream(request, require_session(request), "story", story_frames(story_id, scope))


async def story_detail(request: Request) -> Response:
    _, _, draft = await _visible_draft(request)
    return JSONResponse({"story": draft, "phase": _phase(draft)})
