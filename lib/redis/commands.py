"""Commands and pipelines that read the same through either client.

The two clients agree on simple methods but not on everything the drains need: Lua
(``eval(script, keys=, args=)`` vs ``eval(script, numkeys, *keys_and_args)``) and pipelines
(``pipeline().execute(cmd)`` + ``exec()`` vs ``pipeline().execute_command(*cmd)`` +
``execute()``). These two functions take raw commands (upper-case names, as Redis documents
them) and hide that difference. A pipeline is one round trip on both: one HTTP request to
Upstash's ``/pipeline`` (or ``/multi-exec`` when ``atomic``), one write to a plain Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Command = Sequence[str | int | float]


def _is_upstash(client: Any) -> bool:
    return type(client).__module__.startswith("upstash_redis")


async def execute_command(client: Any, *command: str | int | float) -> Any:
    if _is_upstash(client):
        return await client.execute(list(command))
    return await client.execute_command(*command)


async def execute_pipeline(client: Any, commands: Sequence[Command], *, atomic: bool = False) -> list[Any]:
    if not commands:
        return []
    if _is_upstash(client):
        pipeline = client.multi() if atomic else client.pipeline()
        for command in commands:
            pipeline.execute(list(command))
        return await pipeline.exec()
    async with client.pipeline(transaction=atomic) as pipeline:
        for command in commands:
            pipeline.execute_command(*command)
        return await pipeline.execute()
