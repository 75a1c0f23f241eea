"""Fetching feeds: all of a catalog's feeds concurrently, each failure isolated.

Each request has a timeout (``ERMIS_FEED_TIMEOUT_S``) and a size cap (``ERMIS_FEED_MAX_BYTES``,
read as a stream and abandoned past the cap), and is conditional: the ``ETag`` and
``Last-Modified`` of the last good fetch go out as ``If-None-Match`` / ``If-Modified-Since``, and
a ``304`` reuses the items the previous build parsed from that feed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

from lib.lazy_imports import lazy_import
from lib.settings import get_settings

httpx = lazy_import("httpx")

USER_AGENT = "ErmisAI-Aggregator/1.0 (+https://ermis.ai)"
MAX_CONCURRENT_FETCHES = 16


@dataclass(frozen=True)
class Validators:
    etag: str | None = None
    last_modified: str | None = None


@dataclass
class FetchResult:
    url: str
    outcome: Literal["fetched", "not_modified", "failed"]
    body: bytes = b""
    validators: Validators = field(default_factory=Validators)
    error: str | None = None


class FeedTooLarge(Exception):
    pass


async def _fetch_one(client: httpx.AsyncClient, url: str, previous: Validators, max_bytes: int) -> FetchResult:
    headers = {}
    if previous.etag:
        headers["If-None-Match"] = previous.etag
    if previous.last_modified:
        headers["If-Modified-Since"] = previous.last_modified
    try:
        async with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 304:
                return FetchResult(url, "not_modified", validators=previous)
            if response.status_code != 200:
                return FetchResult(url, "failed", error=f"HTTP {response.status_code}")
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise FeedTooLarge
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise FeedTooLarge
                chunks.append(chunk)
            validators = Validators(response.headers.get("etag"), response.headers.get("last-modified"))
            return FetchResult(url, "fetched", b"".join(chunks), validators)
    except FeedTooLarge:
        return FetchResult(url, "failed", error=f"larger than {max_bytes} bytes")
    except httpx.TimeoutException:
        return FetchResult(url, "failed", error="timed out")
    except httpx.HTTPError as error:
        return FetchResult(url, "failed", error=f"{type(error).__name__}: {error}"[:300])


async def fetch_feeds(urls: list[str], previous: dict[str, Validators]) -> list[FetchResult]:
    settings = get_settings()
    limit = asyncio.Semaphore(MAX_CONCURRENT_FETCHES)
    timeout = httpx.Timeout(settings.ermis_feed_timeout_s)
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=True, headers={"User-Agent": USER_AGENT}) as client:

        async def bounded(url: str) -> FetchResult:
            async with limit:
                try:
                    # httpx's timeout is per read; a feed trickling bytes is bounded here as a whole.
                    async with asyncio.timeout(settings.ermis_feed_timeout_s):
                        return await _fetch_one(
                            client, url, previous.get(url, Validators()), settings.ermis_feed_max_bytes
                        )
                except TimeoutError:
                    return FetchResult(url, "failed", error="timed out")

        return list(await asyncio.gather(*(bounded(url) for url in urls)))
