"""Work that runs after the response has been sent: the spec's ``runAfterResponse``.

Model: every function app is wrapped in ``AfterResponseMiddleware``. For each HTTP request it
opens a *deferral list* in a context variable; ``run_after_response(work)`` appends to it. When
the wrapped app has sent the whole response, the middleware runs the list in order, still
inside the same ASGI call — like Starlette's background tasks, this keeps the serverless
invocation alive until the work is done, while the client already has its answer.

Errors from deferred work go to ``on_error`` (default: ``log_server_error``) and never reach
the response, which is already gone. Called outside a request (a script, a test), the work is
started as a detached task instead — the spec's "microtask fallback" — and
``wait_for_detached_work()`` awaits it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from lib.observability import log_server_error

Work = Callable[[], Awaitable[object]]
ErrorSink = Callable[[BaseException], object]


@dataclass(frozen=True)
class _Deferred:
    work: Work
    on_error: ErrorSink | None


_deferrals: ContextVar[list[_Deferred] | None] = ContextVar("after_response_deferrals", default=None)
_detached: set[asyncio.Task[None]] = set()


def run_after_response(work: Work, on_error: ErrorSink | None = None) -> None:
    deferred = _Deferred(work, on_error)
    pending = _deferrals.get()
    if pending is not None:
        pending.append(deferred)
        return
    task = asyncio.get_running_loop().create_task(_run_deferred(deferred))
    _detached.add(task)
    task.add_done_callback(_detached.discard)


async def wait_for_detached_work() -> None:
    """Await the detached work of this event loop, including work it starts meanwhile.

    A task that finished, or that belongs to another (closed) loop, is dropped rather than
    awaited: its done-callback may never run, and awaiting it again would spin for ever."""
    loop = asyncio.get_running_loop()
    while True:
        for task in [task for task in _detached if task.done() or task.get_loop() is not loop]:
            _detached.discard(task)
        if not _detached:
            return
        await asyncio.wait(list(_detached))


async def _run_deferred(deferred: _Deferred) -> None:
    try:
        await deferred.work()
    except Exception as error:  # noqa: BLE001 - deferred work must never escape
        if deferred.on_error is None:
            log_server_error("after-response", error)
            return
        try:
            deferred.on_error(error)
        except Exception as sink_error:  # noqa: BLE001
            log_server_error("after-response", sink_error)


class AfterResponseMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pending: list[_Deferred] = []
        token = _deferrals.set(pending)
        try:
            await self.app(scope, receive, send)
        finally:
            _deferrals.reset(token)
            # Work may defer more work; it joins the same queue.
            while pending:
                deferred = pending.pop(0)
                token = _deferrals.set(pending)
                try:
                    await _run_deferred(deferred)
                finally:
                    _deferrals.reset(token)
