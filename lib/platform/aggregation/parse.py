"""Parsing feeds with ``feedparser`` into normalised items.

An item keeps what clustering and synthesis need: its link, title, a plain-text summary, a
published time and the source it came from. A body that is not a feed (``feedparser`` flags
it and finds no entries) is a failed source, not an empty one.
"""

from __future__ import annotations

import calendar
import html
import re
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from lib.lazy_imports import lazy_import

feedparser = lazy_import("feedparser")

_TAGS = re.compile(r"<[^>]+>")
_SPACES = re.compile(r"\s+")
MAX_SUMMARY_CHARS = 1000


class FeedItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str
    title: str
    summary: str
    published_at: datetime | None
    source: str


class InvalidFeed(ValueError):
    pass


def plain_text(markup: str) -> str:
    return _SPACES.sub(" ", html.unescape(_TAGS.sub(" ", markup))).strip()


def _published(entry: feedparser.FeedParserDict) -> datetime | None:
    parsed = entry.get("published_parsed") or entry.get("updated_parsed")
    return datetime.fromtimestamp(calendar.timegm(parsed), UTC) if parsed else None


def parse_feed(body: bytes, source: str) -> list[FeedItem]:
    parsed = feedparser.parse(body)
    if parsed.bozo and not parsed.entries:
        raise InvalidFeed(f"not a feed: {type(parsed.get('bozo_exception')).__name__}")
    items: list[FeedItem] = []
    for entry in parsed.entries:
        url, title = entry.get("link"), plain_text(entry.get("title", ""))
        if not url or not title:
            continue
        summary = plain_text(entry.get("summary", ""))[:MAX_SUMMARY_CHARS]
        items.append(FeedItem(url=url, title=title, summary=summary, published_at=_published(entry), source=source))
    return items
