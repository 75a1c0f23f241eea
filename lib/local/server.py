"""The dev server's router: every ``api/`` function behind one ASGI app, routed as Vercel does.

Each function file is imported once, by path and under the module name Vercel's bootstrap
gives it (``lib.runtime.functions``), and its ``app`` receives the request unchanged, full path
included, with dynamic segments also in the query string — what the function sees on Vercel.
As Vercel's runtime does, the request's headers are put into ``vercel.headers``' context for
the call, where the SDKs read them.
Files in ``public/`` are served at the root like Vercel's static output — GET and HEAD only (405
otherwise), never a hidden file or one outside ``public/`` however the path was encoded;
``/__dev/...`` routes are the local runtime's own (queue depths, the development sign-in).
``HEALTH_PATH`` answers 200 JSON once every function imported, and touches no service: the
load balancer's and the container's health check, which must not fail a task because the
database is briefly away (its streams then retry on their own).
Every answer carries the bundle's security headers (``lib.http.security_headers``), the files'
as ``vercel.json`` gives them on Vercel. Anything else is a 404 JSON. A target the function
apps would refuse (NUL, not UTF-8, over-long: ``lib.http.request_limits.head_problem``) is
refused here too, before any file is looked up.

``Server`` is uvicorn's server as the streams need it. It ends the open SSE streams when it
stops (uvicorn would otherwise wait for them, up to their four-minute self-close, or cancel them
mid-frame). And it keeps the garbage collector's full passes off the streams' latency: a full
pass stops the process for as long as it takes to scan every tracked object — 117 ms under 1,000
open streams, a pause every frame due then waits out (``benchmarks/stream_fanout.py``). So at
startup it takes what is loaded — every function app and the libraries, alive as long as the
process — out of the collector's sight (``gc.freeze``; a full pass then scanned only what
requests made: 38 to 76 ms), and it makes full passes ten times rarer (``FULL_COLLECTION_EVERY``
younger passes instead of CPython's 10; the young passes, 3 to 5 ms, are unchanged), so cyclic
garbage among long-lived objects waits a minute or so longer to be freed.
"""

from __future__ import annotations

import gc
import mimetypes
from pathlib import Path
from urllib.parse import urlencode

import uvicorn
from starlette.responses import FileResponse, JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from vercel.headers import HeadersContext, headers_from_asgi_scope

from lib.http.errors import error_response
from lib.http.request_limits import head_problem
from lib.http.security_headers import SecurityHeadersMiddleware
from lib.local.routing import discover_routes, resolve, split_path
from lib.runtime.functions import load_function_app
from lib.streams.listener import end_streams, stop_change_listener


class VercelRouter:
    """One ASGI app in front of every function, with Vercel's file routing."""

    def __init__(self, project_root: Path, dev_routes: dict[str, ASGIApp] | None = None) -> None:
        self.project_root = project_root
        self.dev_routes = dev_routes or {}
        self.public_dir = project_root / "public"
        self.routes = discover_routes(project_root)
        self.apps = {route.file: load_function_app(project_root, route.file) for route in self.routes}
        # The files and the router's own answers get the headers vercel.json gives them on Vercel
        # (a function's app adds its own: wrapping it again would cost every stream frame a call).
        self._own_answers = SecurityHeadersMiddleware(self._answer)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _accept_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        found = resolve(self.routes, scope["path"]) if head_problem(scope) is None else None
        if found is None:
            await self._own_answers(scope, receive, send)
            return
        route, params = found
        if params:
            extra = urlencode(params).encode()
            query = scope.get("query_string", b"")
            scope = {**scope, "query_string": query + b"&" + extra if query else extra}
        with HeadersContext(headers_from_asgi_scope(scope)).use():
            await self.apps[route.file](scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """What no function answers: a refused target, the health check, ``/__dev``, a file, a 404."""
        if (problem := head_problem(scope)) is not None:
            await error_response(*problem)(scope, receive, send)
            return
        path = scope["path"]
        if path == HEALTH_PATH:
            await JSONResponse({"status": "ok", "functions": len(self.apps)})(scope, receive, send)
            return
        if path in self.dev_routes:
            await self.dev_routes[path](scope, receive, send)
            return
        static = self._static_file(path)
        if static is None:
            await error_response(404, "not_found", "No route or file for this path.")(scope, receive, send)
        elif scope["method"] not in STATIC_METHODS:
            allow = ", ".join(sorted(STATIC_METHODS))
            await error_response(405, "method_not_allowed", "A file is only read.", allow=allow)(scope, receive, send)
        else:
            media_type = mimetypes.guess_type(static.name)[0] or "application/octet-stream"
            await FileResponse(static, media_type=media_type)(scope, receive, send)

    def _static_file(self, path: str) -> Path | None:
        """The file under ``public/`` for ``path``; a directory serves its ``index.html``
        (``/admin/`` and ``/admin``), as Vercel's static output does. A segment that is ``..``,
        hidden (``.env``) or holds a backslash never names a file, however it was encoded."""
        segments = split_path(path)
        if any(segment.startswith(".") or "\\" in segment for segment in segments):
            return None
        try:
            candidate = self.public_dir.joinpath(*segments).resolve()
            if candidate.is_dir():
                candidate = candidate / "index.html"
            if self.public_dir.resolve() not in candidate.parents or not candidate.is_file():
                return None
        except (OSError, ValueError):  # a name too long for the filesystem
            return None
        return candidate


async def _accept_lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


HEALTH_PATH = "/__health"
STATIC_METHODS = frozenset({"GET", "HEAD"})
FULL_COLLECTION_EVERY = 100  # middle-generation passes per full pass (CPython: 10)


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, tune_collector: bool = True) -> None:
        super().__init__(config)
        self.tune_collector = tune_collector  # tests run many servers in one process: off

    async def startup(self, sockets: list | None = None) -> None:
        if self.tune_collector:
            gc.freeze()
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
        await super().startup(sockets)

    async def shutdown(self, sockets: list | None = None) -> None:
        end_streams()
        await super().shutdown(sockets)
        await stop_change_listener()  # a detector lets go of its lease: another process takes over at once
