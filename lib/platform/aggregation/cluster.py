"""Clustering items from many sources into stories.

``cluster_items`` is the one function to replace with a better similarity. This one is
deterministic: titles are normalised (lower case, punctuation and stop words dropped), and an
item joins the first cluster whose token set it shares at least ``SIMILARITY_THRESHOLD`` of
(Jaccard) with any member; items are visited oldest first, so the same input always gives the
same clusters. A story's id is derived from its earliest item's URL, so it stays stable while
later reports join it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lib.platform.aggregation.parse import FeedItem


SIMILARITY_THRESHOLD = 0.5
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP_WORDS = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the to was were will with after over"
    " says said new".split()
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def title_tokens(title: str) -> frozenset[str]:
    return frozenset(word for word in _WORD.findall(title.lower()) if word not in _STOP_WORDS)


def similarity(left: frozenset[str], right: frozenset[str]) -> float:
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


@dataclass
class Cluster:
    items: list[FeedItem] = field(default_factory=list)
    tokens: list[frozenset[str]] = field(default_factory=list)

    @property
    def story_id(self) -> str:
        return "story-" + hashlib.sha256(self.items[0].url.encode()).hexdigest()[:16]

    @property
    def fingerprint(self) -> str:
        """Changes whenever membership or a member's text changes: the trigger for re-synthesis."""
        digest = hashlib.sha256()
        for item in sorted(self.items, key=lambda i: i.url):
            digest.update(f"{item.url}\x00{item.title}\x00{item.summary}\x01".encode())
        return digest.hexdigest()[:24]


def cluster_items(items: list[FeedItem]) -> list[Cluster]:
    ordered = sorted({item.url: item for item in items}.values(), key=lambda i: (i.published_at or _EPOCH, i.url))
    clusters: list[Cluster] = []
    for item in ordered:
        tokens = title_tokens(item.title)
        home = next(
            (c for c in clusters if any(similarity(tokens, other) >= SIMILARITY_THRESHOLD for other in c.tokens)),
            None,
        )
        if home is None:
            home = Cluster()
            clusters.append(home)
        home.items.append(item)
        home.tokens.append(tokens)
    return clusters
