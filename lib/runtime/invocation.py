"""The invocation memo: values read once per request and dropped with it (the flag store's
reads, so one tick asks Postgres for a tenant's flags once, however many steps consult them).

``InvocationMemoMiddleware`` (in every function app) opens a fresh dict per HTTP request;
``invocation_memo()`` returns it, or ``None`` outside a request (then nothing is cached).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

_memo: ContextVar[dict[Any, Any] | None] = ContextVar("invocation_memo", default=None)


def invocation_memo() -> dict[Any, Any] | None:
    return _memo.get()


class InvocationMemoMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _memo.set({} if scope["type"] == "http" else None)
        try:
            await self.app(scope, receive, send)
        finally:
            _memo.reset(token)
