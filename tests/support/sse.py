"""Reading a real SSE response off the wire: frames as dicts, with a deadline."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class SseCapture:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    frames: list[dict[str, Any]] = field(default_factory=list)
    closed_by_server: bool = False

    def events(self, name: str) -> list[Any]:
        return [json.loads(frame["data"]) for frame in self.frames if frame.get("event") == name]


async def capture_sse(
    url: str,
    headers: dict[str, str],
    seconds: float,
    stop_after: int | None = None,
    into: SseCapture | None = None,
) -> SseCapture:
    """Read frames for up to ``seconds`` (or until ``stop_after`` frames, or the server closes),
    into ``into`` when given, so a test can watch frames arrive while the read goes on."""
    capture = into or SseCapture()

    async def read() -> None:
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            capture.status = response.status_code
            capture.headers = dict(response.headers)
            frame: dict[str, Any] = {}
            async for line in response.aiter_lines():
                if line == "":
                    if frame:
                        capture.frames.append(frame)
                        frame = {}
                        if stop_after is not None and len(capture.frames) >= stop_after:
                            return
                    continue
                if line.startswith(":"):
                    continue
                key, _, value = line.partition(":")
                frame[key] = value[1:] if value.startswith(" ") else value
            capture.closed_by_server = True

    try:
        await asyncio.wait_for(read(), timeout=seconds)
    except TimeoutError:
        pass
    return capture
