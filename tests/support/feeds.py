"""A fixture feed server on loopback: RSS feeds the test writes, served with ETags, counted
per fetch, and able to misbehave (slow, 500, oversized, not XML) or redirect."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from xml.sax.saxutils import escape

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def rss(channel: str, items: list[tuple[str, str, str]], newest: datetime | None = None) -> str:
    """An RSS 2.0 document; items are (title, link, summary), newest first, a minute apart."""
    newest = newest or datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    entries = "".join(
        f"<item><title>{escape(title)}</title><link>{escape(link)}</link>"
        f"<description>{escape(summary)}</description>"
        f"<pubDate>{format_datetime(newest - timedelta(minutes=index))}</pubDate></item>"
        for index, (title, link, summary) in enumerate(items)
    )
    return f'<?xml version="1.0"?><rss version="2.0"><channel><title>{escape(channel)}</title>{entries}</channel></rss>'


@dataclass
class FeedServer:
    feeds: dict[str, str] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)  # name -> slow | error | huge | invalid
    redirects: dict[str, str] = field(default_factory=dict)  # name -> the Location of its 302
    latency_seconds: float = 0.0
    fetches: Counter = field(default_factory=Counter)
    not_modified: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    base_url: str = ""

    def url(self, name: str) -> str:
        return f"{self.base_url}/feeds/{name}.xml"

    def total_fetches(self) -> int:
        with self.lock:
            return sum(self.fetches.values())

    async def serve(self, request: Request) -> Response:
        name = request.path_params["name"]
        with self.lock:
            self.fetches[name] += 1
        if self.latency_seconds:
            await asyncio.sleep(self.latency_seconds)
        if name in self.redirects:
            return Response(status_code=302, headers={"Location": self.redirects[name]})
        mode = self.modes.get(name)
        if mode == "slow":
            await asyncio.sleep(30)
        if mode == "error":
            return Response("upstream broke", 500)
        if mode == "huge":
            return Response(b"<rss>" + b"x" * (20 * 1024 * 1024) + b"</rss>", media_type="application/rss+xml")
        if mode == "invalid":
            return Response("this is { not xml", media_type="application/rss+xml")
        body = self.feeds.get(name)
        if body is None:
            return Response("no such feed", 404)
        etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:16] + '"'
        if request.headers.get("if-none-match") == etag:
            with self.lock:
                self.not_modified[name] += 1
            return Response(status_code=304, headers={"ETag": etag})
        return Response(body, media_type="application/rss+xml", headers={"ETag": etag})

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/feeds/{name}.xml", self.serve)])
