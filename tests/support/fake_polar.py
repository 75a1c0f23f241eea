"""A fake Polar on loopback: ``POST /v1/events/ingest`` as Polar answers it.

It stores ingested events, deduplicates on ``external_id`` like Polar (a duplicate is counted,
not stored again), and can misbehave on demand: latency, a 422 for chosen events, 5xx answers,
429 rate limits,
connections dropped mid-response, or a pause after accepting a batch (to kill a client between
Polar's accept and its own bookkeeping). ``POLAR_SERVER_URL`` points the bundle at it.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

TOKEN = "polar_oat_fake_test_token"


@dataclass
class FakePolar:
    latency_seconds: float = 0.0
    reject_external_ids: set[str] = field(default_factory=set)
    server_errors_left: int = 0
    rate_limited_left: int = 0
    drops_left: int = 0
    pause_after_accept_seconds: float = 0.0
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: int = 0
    duplicates: int = 0
    received: threading.Event = field(default_factory=threading.Event)
    accepted: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ingest_counts(self) -> dict[str, int]:
        with self.lock:
            return {"events": len(self.events), "requests": self.requests, "duplicates": self.duplicates}

    async def ingest(self, request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "Unauthorized", "detail": "Invalid token"}, 401)
        body = await request.json()
        self.received.set()
        if self.latency_seconds:
            await asyncio.sleep(self.latency_seconds)
        with self.lock:
            self.requests += 1
            if self.server_errors_left > 0:
                self.server_errors_left -= 1
                return JSONResponse({"detail": "upstream unavailable"}, 503)
            if self.rate_limited_left > 0:
                self.rate_limited_left -= 1
                return JSONResponse({"detail": "rate limit exceeded"}, 429, headers={"Retry-After": "1"})
            events = body.get("events") if isinstance(body, dict) else None
            problems = self._validate(events)
            if problems:
                return JSONResponse({"detail": problems}, 422)
            inserted = duplicates = 0
            for event in events:
                key = event.get("external_id")
                if key in self.events:
                    duplicates += 1
                    continue
                self.events[key] = event
                inserted += 1
            self.duplicates += duplicates
        self.accepted.set()
        if self.pause_after_accept_seconds:
            await asyncio.sleep(self.pause_after_accept_seconds)
        return JSONResponse({"inserted": inserted, "duplicates": duplicates})

    def _validate(self, events: Any) -> list[dict[str, Any]]:
        if not isinstance(events, list):
            return [{"loc": ["body", "events"], "msg": "Field required", "type": "missing"}]
        problems = []
        for index, event in enumerate(events):
            if not isinstance(event, dict) or not event.get("name") or not event.get("external_customer_id"):
                problems.append({"loc": ["body", "events", index], "msg": "Invalid event", "type": "value_error"})
            elif event.get("external_id") in self.reject_external_ids:
                problems.append(
                    {"loc": ["body", "events", index, "metadata"], "msg": "Rejected metadata", "type": "value_error"}
                )
        return problems

    @property
    def app(self) -> Starlette:
        inner = Starlette(routes=[Route("/v1/events/ingest", self.ingest, methods=["POST"])])

        async def dropping(scope: Scope, receive: Receive, send: Send) -> None:
            with self.lock:
                drop = scope["type"] == "http" and self.drops_left > 0
                if drop:
                    self.drops_left -= 1
                    self.requests += 1
            if not drop:
                await inner(scope, receive, send)
                return
            # Headers out, then the connection dies mid-body: the client sees a broken response.
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]})
            await send({"type": "http.response.body", "body": b'{"inser', "more_body": False})

        return dropping
