"""Fetching feeds: all of a catalog's feeds concurrently, each failure isolated.

Feed URLs are stored by tenants, so every fetch goes through the egress guard
(``lib.egress``): a refused, malformed or unresolvable URL, like any other failure, is that
feed's ``failed`` state with the guard's detail, and the rest of the catalog goes on. Redirects
are followed up to five hops, each checked the same way.

Each fetch as a whole — every hop, and the body — is bounded by ``ERMIS_FEED_TIMEOUT_S`` and
capped at ``ERMIS_FEED_MAX_BYTES`` (read as a stream and abandoned past the cap), and is
conditional: the ``ETag`` and
``Last-Modified`` of the last good fetch go out as ``If-None-Match`` / ``If-Modified-Since``, and
a ``304`` reuses the items the previous build parsed from that feed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from lib.lazy_imports import lazy_import
from lib.settings import get_settings

if TYPE_CHECKING:
    from lib.egress.client import GuardedSession

egress_client = lazy_import("lib.egress.client")

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


async def _fetch_one(session: GuardedSession, url: str, previous: Validators, max_bytes: int) -> FetchResult:
    headers = {}
    if previous.etag:
        headers["If-None-Match"] = previous.etag
    if previous.last_modified:
        headers["If-Modified-Since"] = previous.last_modified
    async with session.open("GET", url, headers=headers, follow_redirects=True) as response:
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


async def fetch_feeds(urls: list[str], previous: dict[str, Validators]) -> list[FetchResult]:
    settings = get_settings()
    limit = asyncio.Semaphore(MAX_CONCURRENT_FETCHES)
    timeout_s, max_bytes = settings.ermis_feed_timeout_s, settings.ermis_feed_max_bytes
    async with egress_client.GuardedSession(timeout_s=timeout_s, headers={"User-Agent": USER_AGENT}) as session:

        async def bounded(url: str) -> FetchResult:
            async with limit:
                try:
                    # httpx's timeout is per read; a feed trickling bytes is bounded here as a whole.
                    async with asyncio.timeout(timeout_s):
                        return await _fetch_one(session, url, previous.get(url, Validators()), max_bytes)
                except FeedTooLarge:
                    return FetchResult(url, "failed", error=f"larger than {max_bytes} bytes")
                except Exception as error:  # noqa: BLE001 - one feed's failure, whatever it is, is that feed's
                    return FetchResult(url, "failed", error=egress_client.failure_detail(error, timeout_s))

        return list(await asyncio.gather(*(bounded(url) for url in urls)))
