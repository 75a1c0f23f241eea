"""Synthesis: a cluster of reports becomes one story (headline + summary), through a provider.

``SynthesisProvider`` is the interface. ``DeterministicProvider`` (the default) works offline
and always gives the same story for the same cluster: the earliest report's title, the
fullest summary, and the sources named; it reports token counts as a model would (words in,
words out), so usage accounting runs the same path as with a real model.
``ChatCompletionsProvider`` calls an OpenAI-compatible ``/chat/completions`` endpoint
(``ERMIS_SYNTHESIS_PROVIDER=chat-completions`` with ``ERMIS_SYNTHESIS_URL``,
``ERMIS_SYNTHESIS_API_KEY``, ``ERMIS_SYNTHESIS_MODEL``).
"""

from __future__ import annotations

import json
from typing import Protocol

from pydantic import BaseModel

from lib.lazy_imports import lazy_import
from lib.platform.aggregation.cluster import Cluster
from lib.settings import get_settings, secret_or_none

httpx = lazy_import("httpx")

MAX_HEADLINE_CHARS = 300


class Synthesis(BaseModel):
    headline: str
    summary: str
    model: str
    input_tokens: int
    output_tokens: int


class SynthesisProvider(Protocol):
    async def synthesise(self, cluster: Cluster) -> Synthesis: ...


def _words(text: str) -> int:
    return len(text.split())


def _cluster_text(cluster: Cluster) -> str:
    return "\n".join(f"- {item.source}: {item.title}. {item.summary}" for item in cluster.items)


class DeterministicProvider:
    model = "ermis-deterministic-v1"

    async def synthesise(self, cluster: Cluster) -> Synthesis:
        lead = cluster.items[0]
        fullest = max(cluster.items, key=lambda item: (len(item.summary), item.url)).summary or lead.title
        sources = sorted({item.source for item in cluster.items})
        summary = (
            fullest if len(sources) == 1 else f"{fullest} (Reported by {len(sources)} sources: {', '.join(sources)}.)"
        )
        headline = lead.title[:MAX_HEADLINE_CHARS]
        return Synthesis(
            headline=headline,
            summary=summary,
            model=self.model,
            input_tokens=_words(_cluster_text(cluster)),
            output_tokens=_words(headline) + _words(summary),
        )


class ChatCompletionsProvider:
    def __init__(self, url: str, api_key: str | None, model: str) -> None:
        self.url, self.api_key, self.model = url.rstrip("/"), api_key, model

    async def synthesise(self, cluster: Cluster) -> Synthesis:
        prompt = (
            "Write one news story from these reports. Answer JSON with keys headline and summary.\n"
            + _cluster_text(cluster)
        )
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with httpx.AsyncClient(timeout=60) as client:
            response = await client.post(
                f"{self.url}/chat/completions",
                headers=headers,
                json={
                    "model": self.model,
                    "messages": [{"role": "user", "content": prompt}],
                    "response_format": {"type": "json_object"},
                },
            )
        response.raise_for_status()
        payload = response.json()
        story = json.loads(payload["choices"][0]["message"]["content"])
        usage = payload.get("usage") or {}
        return Synthesis(
            headline=str(story["headline"])[:MAX_HEADLINE_CHARS],
            summary=str(story["summary"]),
            model=payload.get("model", self.model),
            input_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", 0)),
        )


def configured_provider() -> SynthesisProvider:
    settings = get_settings()
    if settings.ermis_synthesis_provider == "chat-completions":
        if not settings.ermis_synthesis_url:
            raise RuntimeError("ERMIS_SYNTHESIS_PROVIDER=chat-completions needs ERMIS_SYNTHESIS_URL")
        return ChatCompletionsProvider(
            settings.ermis_synthesis_url,
            secret_or_none(settings.ermis_synthesis_api_key),
            settings.ermis_synthesis_model,
        )
    return DeterministicProvider()
