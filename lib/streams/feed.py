"""``/api/feed/events`` (spec: the feed stream) and its fallback ``/api/feed``.

One event, ``feed.changed``, carrying the spec's watermark — ``{latestUpdatedAt, draftCount}``
from the single aggregate over the session tenant's drafts, validated by its contract
(``FeedChanged``) — sent on connect and then whenever the tenant's drafts changed since the
last frame: when the drafts channel's position in the stream log moved (every committed write
moves it, in commit order: ``lib.platform.editorial.FeedWatermark``) or the watermark did. The
spec compared the watermark alone, and stayed silent when a transaction that started earlier
committed an update later (its ``updated_at`` is older than the maximum already sent, the
count unchanged): the feed missed that change. The frame's ``id:`` is that position, and
``/api/feed`` returns it as ``position``: a client refetches when the pair moved, whichever way
it learnt of it.

The stream reads when its tenant's drafts change (``listener``: pushed, ``drafts|<tenant>``), on
the 60 s safety net, or — when push is unavailable — every 4 s; reads are shared per tenant and
read key. No tenant scope: 204 (nothing to watch; ``EventSource`` stops for good). A failed
read skips the tick; the stream goes on. Self-closes after 240 s; the browser reconnects, and
gets the watermark at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.lazy_imports import lazy_import
from lib.platform.editorial import FeedWatermark, list_tenant_drafts, read_draft_feed_watermark
from lib.streams.limits import limited_stream
from lib.streams.listener import positioned_before_read
from lib.streams.shared_reads import SharedReads
from lib.streams.sse import RETRY_MS, event_body, keep_alive_frame, with_id
from lib.streams.watch import KEEP_ALIVE, ChangeWatch, stream_timing

stream_events = lazy_import("lib.contracts.stream_events")

FEED_POLL_INTERVAL_MS = 4000
FEED_MAX_DURATION_S = 240

shared_watermarks = SharedReads()


async def _read_and_shape(tenant_scope_id: str, position_first: bool) -> tuple[FeedWatermark, bytes | None]:
    """The watermark and its frame's body, made once for every stream that shares the read;
    ``position_first`` when the read cannot count on the detector (``positioned_before_read``)."""
    if position_first:
        await positioned_before_read()
    watermark = await read_draft_feed_watermark(tenant_scope_id)
    return watermark, event_body(
        "feed.changed", stream_events.FeedChanged.model_validate(watermark.payload).model_dump()
    )


async def feed_frames(tenant_scope_id: str) -> AsyncIterator[bytes]:
    timing = stream_timing(FEED_POLL_INTERVAL_MS, FEED_MAX_DURATION_S)
    deadline = timing.deadline()
    last: FeedWatermark | None = None
    watch = ChangeWatch(timing, (("drafts", tenant_scope_id),))

    def start_read() -> asyncio.Future[tuple[FeedWatermark, bytes | None]]:
        position_first = last is None or not watch.listener.healthy
        return watch.start_shared(
            shared_watermarks, tenant_scope_id, lambda: _read_and_shape(tenant_scope_id, position_first)
        )

    async with contextlib.aclosing(
        watch.reads(deadline, ("feed", tenant_scope_id), start_read, "/api/feed/events", tenant=tenant_scope_id)
    ) as reads:
        async for read in reads:
            if read is KEEP_ALIVE:
                yield keep_alive_frame()
                continue
            watermark, body = read
            if watermark != last and body is not None:
                # A connection's first frame sets the retry.
                yield with_id(str(watermark.position), body, RETRY_MS if last is None else None)
            last = watermark


async def feed_events(request: Request) -> Response:
    session = require_session(request)
    if session.tenant_scope_id is None:
        return Response(status_code=204)
    return await limited_stream(request, session, "feed", feed_frames(session.tenant_scope_id))


async def feed_drafts(request: Request) -> Response:
    session = require_session(request)
    if session.tenant_scope_id is None:
        return JSONResponse({"drafts": [], "watermark": None, "position": None})
    tenant = session.tenant_scope_id
    # The watermark first: the drafts read after it hold every change up to its position, so a
    # client that keys on the position never keeps a list older than the position it holds.
    await positioned_before_read()
    watermark = await read_draft_feed_watermark(tenant)
    drafts = await list_tenant_drafts(tenant)
    return JSONResponse({"drafts": drafts, "watermark": watermark.payload, "position": watermark.position})
