"""A loopback Sentry ingest: collects what sentry-sdk posts to ``/api/<project>/envelope/``."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sentry_sdk
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.servers import serve_in_thread


@dataclass
class SentrySink:
    dsn: str
    envelopes: list[list[dict[str, Any]]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)

    def items(self) -> list[dict[str, Any]]:
        sentry_sdk.flush(timeout=5)
        return [item for envelope in self.envelopes for item in envelope]


@contextmanager
def sentry_sink() -> Iterator[SentrySink]:
    sink = SentrySink(dsn="")

    async def envelope(request: Request) -> JSONResponse:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        items = []
        for raw in body.split(b"\n"):
            try:
                items.append(json.loads(raw))
            except ValueError:
                continue
        sink.envelopes.append(items)
        sink.arrived.set()
        return JSONResponse({})

    app = Starlette(routes=[Route("/api/{project}/envelope/", envelope, methods=["POST"])])
    with serve_in_thread(app) as url:
        sink.dsn = f"http://publickey@{url.removeprefix('http://')}/42"
        try:
            yield sink
        finally:
            sentry_sdk.get_client().close()
