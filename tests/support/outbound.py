"""What the outbound-request tests observe with: servers that count what reaches them, every
connection attempt this process makes, and a DNS of the test's own.

- ``Counting``: an ASGI app answering every method and path with a chosen status (optionally
  after a redirect, or never), counting the requests and keeping their headers.
- ``recorded_connects``: the address of every ``socket.connect`` the process makes inside the
  block, from the interpreter's audit events — so a test sees that no connection to a refused
  destination was even attempted, including to addresses no test server can listen on.
- ``MALFORMED_URLS``: URLs a tenant can store that must fail alone, with their details.
- ``TestResolver``: answers for host names the test invents (``metadata.test``), each name a
  list of answer lists given out in turn (the last repeating): public first, loopback second is
  DNS rebinding.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lib.egress.destinations import system_resolver

# URLs a tenant can store that must fail alone, each with the detail its failure is logged with.
MALFORMED_URLS = {
    "http://[x": "invalid URL: the host or port does not parse",
    "http://a\tb/": "invalid URL: a control character or a space",
    "http://a\u0001b/": "invalid URL: a control character or a space",
    "http://" + "a" * 10_000 + ".example/": "invalid URL: longer than 2048 characters",
    "file:///etc/passwd": "destination refused: the scheme file is not http or https",
    "gopher://example.com:70/1": "destination refused: the scheme gopher is not http or https",
    "http://user:pass@example.com/": "destination refused: credentials in the URL",
    "http://127.0.0.1:9/feed": "destination refused: the host is a loopback address",
}

_connects: list[list[Any]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect" and _connects:
        for recording in _connects:
            recording.append(args[1])


sys.addaudithook(_audit)


@contextmanager
def recorded_connects() -> Iterator[list[Any]]:
    """Every address this process tries to connect to inside the block (any thread)."""
    recording: list[Any] = []
    _connects.append(recording)
    try:
        yield recording
    finally:
        _connects.remove(recording)


def connected_to_port(recording: list[Any], port: int) -> bool:
    return any(isinstance(address, tuple) and len(address) >= 2 and address[1] == port for address in recording)


class Counting:
    """A server that counts the requests reaching it and answers ``status`` (``statuses``: one
    per request in turn, the last repeating; ``down_until``: a 503 to all until then; ``headers``:
    sent with every answer;
    ``redirect_to``: a 302 there; ``delay_s``: after that long)."""

    def __init__(
        self,
        status: int = 200,
        redirect_to: str | None = None,
        delay_s: float = 0.0,
        statuses: list[int] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.statuses = statuses or [status]
        self.down_until = 0.0  # monotonic: until then, every answer is a 503 (an outage)
        self.redirect_to, self.delay_s, self.headers = redirect_to, delay_s, headers or {}
        self.requests: list[dict[str, str]] = []
        self.times: list[float] = []  # monotonic, one per request
        self.answered: list[int] = []  # the status each request was answered
        self.lock = threading.Lock()

    async def answer(self, request: Request) -> Response:
        await request.body()
        with self.lock:
            self.requests.append(dict(request.headers))
            self.times.append(time.monotonic())
            status = self.statuses[min(len(self.requests), len(self.statuses)) - 1]
            if time.monotonic() < self.down_until:
                status = 503
            self.answered.append(status)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.redirect_to is not None:
            return Response(status_code=302, headers={"Location": self.redirect_to})
        return Response("<rss version='2.0'><channel><title>c</title></channel></rss>", status, headers=self.headers)

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.requests)

    @property
    def app(self) -> Starlette:
        methods = ["GET", "POST", "PUT", "HEAD"]
        return Starlette(routes=[Route("/{path:path}", self.answer, methods=methods)])


class TestResolver:
    """A resolver for ``lib.egress.client.resolving_with``: ``{"name.test": [["a", "b"], ...]}``;
    any other name is the system's (``localhost``)."""

    __test__ = False  # not a pytest class

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.asked: dict[str, int] = {}

    async def __call__(self, host: str, port: int) -> list[str]:
        turns = self.answers.get(host.lower())
        if turns is None:
            return await system_resolver(host, port)
        turn = self.asked.get(host.lower(), 0)
        self.asked[host.lower()] = turn + 1
        return turns[min(turn, len(turns) - 1)]


class Trickler:
    """A receiver that answers one byte of its status line and headers every ``every_s``, for
    ``for_s`` in all (a read timeout never fires): ``opened`` and ``closed`` are the monotonic
    times of its connection (``closed``: when the client gave up)."""

    def __init__(self, for_s: float = 60.0, every_s: float = 1.0) -> None:
        self.for_s, self.every_s = for_s, every_s
        self.opened: float | None = None
        self.closed: float | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened = time.monotonic()
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * int(self.for_s / self.every_s) + b"\r\n\r\n"
        try:
            for byte in head:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(self.every_s)
                if reader.at_eof():
                    break
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:  # the server is stopping: end the trickle quietly
            pass
        self.closed = time.monotonic()
        writer.close()

    @contextmanager
    def serving(self) -> Iterator[str]:
        loop = asyncio.new_event_loop()
        ready: list[int] = []
        started = threading.Event()

        def run() -> None:
            server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            ready.append(server.sockets[0].getsockname()[1])
            started.set()
            loop.run_forever()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        started.wait(timeout=10)
        try:
            yield f"http://127.0.0.1:{ready[0]}"
        finally:
            asyncio.run_coroutine_threadsafe(_cancel_all_then_stop(loop), loop)
            thread.join(timeout=5)


async def _cancel_all_then_stop(loop: asyncio.AbstractEventLoop) -> None:
    """End a server loop's connections (a trickle still under way) before stopping it."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    loop.stop()


class Receiver:
    """A webhook receiver on loopback that answers with a chosen status (or never)."""

    def __init__(self, status: int = 200, hang: bool = False) -> None:
        self.status, self.hang = status, hang
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()

    async def hook(self, request: Request) -> JSONResponse:
        body = await request.body()
        with self.lock:
            self.received.append((dict(request.headers), body))
        if self.hang:
            await asyncio.sleep(30)
        return JSONResponse({}, self.status)

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hook", self.hook, methods=["POST"])])
