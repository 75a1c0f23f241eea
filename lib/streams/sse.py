"""SSE plumbing (spec: "The three endpoints").

Every stream answers with exactly the spec's four headers — ``Content-Type:
text/event-stream; charset=utf-8``, ``Cache-Control: no-cache, no-transform``, ``Connection:
keep-alive``, ``X-Accel-Buffering: no`` (the anti-buffering pair keeps proxies from holding
frames).

``EventStreamResponse`` is the response, built for holding thousands of idle streams per
process (issue 13): the stream runs in the request's own task, and one small task waits for the
client's ``http.disconnect`` and then cancels the stream the way ``asyncio.timeout`` cancels at
its deadline (the stream's ``finally`` blocks run; the cancellation ends there). Keep-alive
``: ping`` comments come from the stream's own wait (``watch.ChangeWatch`` returns
``KEEP_ALIVE`` every ``PING_SECONDS``). ``sse-starlette``'s ``EventSourceResponse`` does the same
job with four anyio tasks, a lock and an event per connection — measured at 20 KB of the 48 KB
Python allocates per idle stream — so only its frame encoder (``ServerSentEvent``) is used.

``sse_frame`` is the only way a frame is made, and data cannot break it: the event name must
match ``EVENT_NAME``, the data is JSON on one line (JSON escapes every ``\\r``/``\\n``; U+2028 and
U+2029 are escaped too, for line readers that split on them), the id
has line breaks and NULs removed, and data that cannot be encoded (a lone surrogate) gives
``None`` — the caller drops that frame and the stream goes on. Every frame has an ``id:``;
the first also carries ``retry:`` so browsers reconnect after ``RETRY_MS``. ``cursor_body()`` is
the one other frame: ``stream.cursor`` with ``{}``, which moves the browser's ``Last-Event-ID``
past rows it has seen without sending them; clients that do not listen for it never see it,
and the tab that relays a stream to the others (``ermis-realtime.js``) reads the id from it.

A stream that ends as planned (its self-close, the server stopping)
sends ``stream.end`` last, without an id: ``ermis-realtime.js`` reconnects at once from its last
id instead of reporting an outage and waiting ``retry``; a client that ignores the event
reconnects after ``retry`` as EventSource always does. A disconnect or a HEAD gets no such frame.

A stream lives no longer than the session that opened it: the response is given the seconds
its token still verifies (``Session.verifies_for_s``), and when they run out before the stream
ends it is stopped as a disconnect stops it (its ``finally`` blocks run; a frame is never cut,
as each is one ``send``) and ends with ``stream.end`` ``{"reason": "token_expired"}``: the
client reconnects at once with the session the page's auth has refreshed in the cookie, from
its last id. So a user removed from a tenant, or a demoted operator, stops receiving its events
when the token that said otherwise expires (Clerk's last a minute), not at the self-close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import cache
from types import TracebackType
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from lib.lazy_imports import lazy_import
from lib.runtime.process import PROCESS_TAG

sse_starlette = lazy_import("sse_starlette")
stream_events = lazy_import("lib.contracts.stream_events")

SSE_HEADERS = {"Cache-Control": "no-cache, no-transform", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
EVENT_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
RETRY_MS = 3000
_ID_UNSAFE = re.compile(r"[\r\n\x00]")
CURSOR_EVENT = "stream.cursor"
END_EVENT = "stream.end"


def event_body(event: str, data: Any) -> bytes | None:
    """The ``event:`` and ``data:`` lines of a frame and its end, without ``id:``: what every
    stream sending this event shares (each prefixes its own id, ``with_id``); ``None`` when the
    data cannot be encoded."""
    if not EVENT_NAME.match(event):
        raise ValueError(f"invalid SSE event name {event!r}")
    try:
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
        # Some line readers also break at U+2028/U+2029; escaped, the JSON means the same.
        payload = payload.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
        return sse_starlette.ServerSentEvent(data=payload, event=event).encode()
    except (TypeError, ValueError):
        return None


def with_id(event_id: str, body: bytes, retry: int | None = None) -> bytes:
    """``body`` (``event_body``) as a whole frame with its ``id:`` (and ``retry:``) first — the
    order of fields within a frame means nothing to a client. Without ``retry`` — every frame
    but a connection's first, a million in a burst — the ``id:`` line is written here, byte for
    byte what ``ServerSentEvent`` writes (a test compares them), at a fifth of its cost."""
    event_id = _ID_UNSAFE.sub("", event_id)
    separator = _separator()
    if retry is None:
        return b"id: " + event_id.encode() + separator + body
    head = sse_starlette.ServerSentEvent(id=event_id, retry=retry).encode()
    return head[: -len(separator)] + body


def sse_frame(event: str, data: Any, event_id: str, retry: int | None = None) -> bytes | None:
    body = event_body(event, data)
    return None if body is None else with_id(event_id, body, retry)


# The fixed frames are built on first use, not at import: building them loads the encoder and
# the event models, which a function's start does not pay for (lib.lazy_imports).
@cache
def _separator() -> bytes:
    return sse_starlette.ServerSentEvent.DEFAULT_SEPARATOR.encode()


@cache
def cursor_body() -> bytes:
    return sse_starlette.ServerSentEvent(
        data=stream_events.StreamCursor().model_dump_json(), event=CURSOR_EVENT
    ).encode()


@cache
def end_frame(reason: str | None = None) -> bytes:
    """The last frame of a stream that ends as planned (its self-close, the server stopping; its
    session's expiry, ``reason``): no id, so the client's last id stays; ermis-realtime.js
    reconnects at once instead of reporting an error."""
    data = stream_events.StreamEnd.model_validate({"reason": reason}).model_dump_json(exclude_none=True)
    return sse_starlette.ServerSentEvent(data=data, event=END_EVENT).encode()


@cache
def keep_alive_frame() -> bytes:
    return sse_starlette.ServerSentEvent(comment="ping").encode()


open_streams: Counter[str] = Counter()
"""Streams open in this process, by name — what ``/__dev/streams`` reports on the dev server."""


class _EndsOnDisconnect:
    """Cancels the task running the block when the client disconnects — as ``asyncio.timeout``
    cancels at its deadline — and then ends the block quietly (``disconnected`` says so)."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.disconnected = False
        self._inside = False

    async def __aenter__(self) -> _EndsOnDisconnect:
        self._task = asyncio.current_task()
        self._inside = True
        self._listener = asyncio.ensure_future(self._listen())
        return self

    async def _listen(self) -> None:
        with contextlib.suppress(Exception):  # a receive that fails says nothing about the client
            while (await self._receive())["type"] != "http.disconnect":
                pass
            self.disconnected = True
            if self._inside and self._task is not None:
                self._task.cancel()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        self._inside = False
        self._listener.cancel()
        # Ours only if the client went and nobody else also cancelled the task.
        return kind is asyncio.CancelledError and self.disconnected and self._task.uncancel() == 0


class EventStreamResponse(Response):
    """``text/event-stream`` of ``frames`` (bytes) until they end, the client goes or
    ``session_s`` (the seconds its session still verifies, ``None``: unbounded) run out; HEAD
    gets the headers only. Counted in ``open_streams`` under ``name`` while it runs; ``on_end``
    (the stream's slot release, ``lib.streams.limits``) is awaited when it stops, however it stops."""

    media_type = "text/event-stream"

    def __init__(
        self,
        name: str,
        frames: AsyncIterator[bytes],
        on_end: Callable[[], Awaitable[None]] | None = None,
        session_s: float | None = None,
    ) -> None:
        self.name, self.frames, self.on_end, self.session_s = name, frames, on_end, session_s
        self.status_code, self.background = 200, None
        self.init_headers({**SSE_HEADERS, "X-Ermis-Process": PROCESS_TAG})  # which process: the demo shows it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async with contextlib.aclosing(self.frames) as frames:
            if scope["method"] != "HEAD":
                open_streams[self.name] += 1
                session = asyncio.timeout(None if self.session_s is None else max(0.0, self.session_s))
                reason = None
                try:
                    async with _EndsOnDisconnect(receive) as connection, session:
                        async for frame in frames:
                            await send({"type": "http.response.body", "body": frame, "more_body": True})
                except TimeoutError:
                    if not session.expired():
                        raise
                    reason = "token_expired"
                finally:
                    open_streams[self.name] -= 1
                    if self.on_end is not None:
                        await self.on_end()
                if connection.disconnected:
                    return
                await send({"type": "http.response.body", "body": end_frame(reason), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
