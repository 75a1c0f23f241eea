"""Slow, idle and malformed clients off Vercel (issue 21): what ``scripts/serve`` and the dev
server put between a socket and the functions.

On Vercel the platform's edge reads each request before a function sees it. ``scripts/serve``
faces the network itself (or a load balancer that passes connections through), and uvicorn
alone holds a connection that sends nothing, or trickles its headers a byte at a time, for ever:
its keep-alive timer starts only after a first response, and every byte received restarts it.
``GuardedH11Protocol`` is uvicorn's h11 protocol with one more timer, the *read deadline*:

- when a connection opens, and again when a response completes (the next request on a
  keep-alive connection), the request's head — request line and headers — must be complete
  within ``ERMIS_HEADER_TIMEOUT_S`` (default 10 s). The deadline is counted from then, not from
  the last byte, so trickling does not extend it; a connection that has not sent its head by
  then is closed;
- once the head is in, the body must be complete within ``ERMIS_BODY_TIMEOUT_S`` (default
  30 s); if it is not (a body that stalls, a chunk size announced and never sent), the client
  gets a 408 JSON answer and the connection is closed;
- a request fully read has no deadline: an SSE stream lives as long as its self-close says.

Sizes are bounded too: a head still incomplete past ``MAX_HEADER_BYTES`` is refused by h11 (400),
a complete one over it by ``lib.http.request_limits`` (431), as is a body over the function's cap
(413); a chunk header h11 cannot parse is a 400.
``server_config`` is the one place these are set, for ``scripts/serve``, ``scripts/dev`` and the
tests' servers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from lib.http.errors import error_response
from lib.http.request_limits import MAX_HEADER_BYTES
from lib.settings import get_settings

KEEP_ALIVE_S = 5


class GuardedH11Protocol(H11Protocol):
    _read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_read_deadline()

    def data_received(self, data: bytes) -> None:
        head_pending = self.conn.their_state is h11.IDLE
        super().data_received(data)
        if head_pending and self.conn.their_state is not h11.IDLE:
            self._arm_read_deadline()  # the head is in: now the body's deadline, if any

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_read_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_deadline()
        super().connection_lost(exc)

    def _cancel_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _arm_read_deadline(self) -> None:
        self._cancel_read_deadline()
        settings = get_settings()
        state = self.conn.their_state
        if state is h11.IDLE:
            self._read_deadline = self.loop.call_later(settings.ermis_header_timeout_s, self._read_deadline_passed)
        elif state is h11.SEND_BODY:
            self._read_deadline = self.loop.call_later(settings.ermis_body_timeout_s, self._read_deadline_passed)

    def _read_deadline_passed(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY and self.cycle is not None and not self.cycle.response_started:
            self._answer_request_timeout()
        if state in (h11.IDLE, h11.SEND_BODY):
            self.transport.close()

    def _answer_request_timeout(self) -> None:
        response = error_response(408, "request_timeout", "The request body did not arrive in time.")
        headers = [*response.raw_headers, (b"connection", b"close")]
        for event in (
            h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"),
            h11.Data(data=response.body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        # The app still waits for the body: it is told the client is gone, and answers nothing more.
        self.cycle.response_started = self.cycle.response_complete = True
        self.cycle.disconnected = True
        self.cycle.message_event.set()


def server_config(app: ASGIApp, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for a server that faces clients directly."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=GuardedH11Protocol,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE_S,
        **options,
    )
