"""``/api/feed/events`` (spec: the feed stream) and its fallback ``/api/feed``.

One event, ``feed.changed``, with the watermark that moved — ``{latestUpdatedAt, draftCount}``
from the single aggregate over the session tenant's drafts — emitted when either field
differs from what this connection last sent, silent otherwise; the payload is validated by its
contract (``FeedChanged``). The stream reads when its tenant's drafts change (``listener``:
pushed, ``drafts|<tenant>``), on the 60 s safety net, or — when push is unavailable — every 4 s;
reads are shared per tenant and read key. No tenant scope: 204 (nothing to
watch; ``EventSource`` stops for good). A failed read skips the tick; the stream goes on.
Self-closes after 240 s; the browser reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.contracts.stream_events import FeedChanged
from lib.platform.activity import normalize_tenant_id
from lib.platform.editorial import list_tenant_drafts, read_draft_feed_watermark
from lib.streams.shared_reads import SharedReads
from lib.streams.sse import KEEP_ALIVE_FRAME, RETRY_MS, EventStreamResponse, sse_frame
from lib.streams.watch import KEEP_ALIVE, ChangeWatch, stream_timing

FEED_POLL_INTERVAL_MS = 4000
FEED_MAX_DURATION_S = 240

shared_watermarks = SharedReads()


def _frame(watermark: dict, retry: int | None = None) -> bytes | None:
    return sse_frame(
        "feed.changed",
        FeedChanged.model_validate(watermark).model_dump(),
        f"{watermark['latestUpdatedAt']}|{watermark['draftCount']}",
        retry=retry,
    )


async def _read_and_frame(tenant_scope_id: str) -> tuple[dict, bytes | None]:
    """The watermark and its frame, made once for every stream that shares the read."""
    watermark = await read_draft_feed_watermark(tenant_scope_id)
    return watermark, _frame(watermark)


async def feed_frames(tenant_scope_id: str) -> AsyncIterator[bytes]:
    timing = stream_timing(FEED_POLL_INTERVAL_MS, FEED_MAX_DURATION_S)
    deadline = timing.deadline()
    last: dict | None = None
    watch = ChangeWatch(timing, (("drafts", normalize_tenant_id(tenant_scope_id)),))

    def start_read() -> asyncio.Future[tuple[dict, bytes | None]]:
        return watch.start_shared(shared_watermarks, tenant_scope_id, lambda: _read_and_frame(tenant_scope_id))

    async with contextlib.aclosing(
        watch.reads(deadline, ("feed", tenant_scope_id), start_read, "/api/feed/events", tenant=tenant_scope_id)
    ) as reads:
        async for read in reads:
            if read is KEEP_ALIVE:
                yield KEEP_ALIVE_FRAME
                continue
            watermark, frame = read
            if watermark != last:
                if last is None:
                    frame = _frame(watermark, RETRY_MS)  # a connection's first frame sets the retry
                if frame is not None:
                    yield frame
                last = watermark


async def feed_events(request: Request) -> Response:
    session = require_session(request)
    if session.tenant_scope_id is None:
        return Response(status_code=204)
    return EventStreamResponse("feed", feed_frames(session.tenant_scope_id))


async def feed_drafts(request: Request) -> Response:
    session = require_session(request)
    if session.tenant_scope_id is None:
        return JSONResponse({"drafts": [], "watermark": None})
    tenant = session.tenant_scope_id
    drafts, watermark = await asyncio.gather(list_tenant_drafts(tenant), read_draft_feed_watermark(tenant))
    return JSONResponse({"drafts": drafts, "watermark": watermark})
