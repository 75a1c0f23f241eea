"""lib.platform.aggregation.synthesis: the offline provider, and the chat-completions provider
against an OpenAI-compatible server on loopback."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lib.platform.aggregation.cluster import cluster_items
from lib.platform.aggregation.parse import parse_feed
from lib.platform.aggregation.synthesis import ChatCompletionsProvider, DeterministicProvider, configured_provider
from tests.support.feeds import rss
from tests.support.servers import serve_in_thread

CLUSTER = cluster_items(parse_feed(rss("A", [("Earthquake in Chile", "https://a/1", "Strong quake.")]).encode(), "A"))[
    0
]


async def test_deterministic_provider_is_stable_and_counts_tokens() -> None:
    first = await DeterministicProvider().synthesise(CLUSTER)
    assert first == await DeterministicProvider().synthesise(CLUSTER)
    assert first.headline == "Earthquake in Chile" and first.summary == "Strong quake."
    assert first.input_tokens > 0 and first.output_tokens == 5


async def test_chat_completions_provider_speaks_the_protocol(set_env) -> None:
    seen: list[dict] = []

    async def completions(request: Request) -> JSONResponse:
        seen.append({"auth": request.headers.get("authorization"), "body": await request.json()})
        content = json.dumps({"headline": "Quake shakes Chile", "summary": "A strong earthquake struck."})
        return JSONResponse(
            {
                "model": "test-model-1",
                "choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 42, "completion_tokens": 9},
            }
        )

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    with serve_in_thread(app) as url:
        set_env(
            ERMIS_SYNTHESIS_PROVIDER="chat-completions",
            ERMIS_SYNTHESIS_URL=f"{url}/v1",
            ERMIS_SYNTHESIS_API_KEY="sk-test",
            ERMIS_SYNTHESIS_MODEL="test-model",
        )
        provider = configured_provider()
        assert isinstance(provider, ChatCompletionsProvider)
        result = await provider.synthesise(CLUSTER)
    assert (result.headline, result.model, result.input_tokens, result.output_tokens) == (
        "Quake shakes Chile",
        "test-model-1",
        42,
        9,
    )
    assert seen[0]["auth"] == "Bearer sk-test"
    assert seen[0]["body"]["model"] == "test-model"
    assert "Earthquake in Chile" in seen[0]["body"]["messages"][0]["content"]
