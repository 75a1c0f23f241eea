"""The one Lambda handler of every function: ``lib.runtime.aws.entry.handler``.

Each function of the template sets ``ERMIS_AWS_ENTRYPOINT`` to the ``api/`` file it serves; the
file is loaded once per process as Vercel's bootstrap loads it (``lib.runtime.functions``),
after the function's secrets are read into the environment (``secrets``: by reference, once
per cold start), and the event's shape picks the path:

- SQS records → the consumer that file created (``ERMIS_AWS_QUEUE_TOPIC``: its wire topic),
  through ``sqs.handle_sqs_event``;
- ``{"ermisCron": path}`` (EventBridge Scheduler) → ``scheduler.run_scheduled_cron``;
- anything else (API Gateway, a function URL) → the file's ``app`` through Mangum.

All of them run on one event loop per process, kept across invocations, so the database pool
and Redis client opened by one invocation serve the next (Mangum runs on the same loop).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from types import ModuleType
from typing import Any, TypeVar

from lib.bundle import PROJECT_ROOT
from lib.queues.consumer import QueueConsumer, registered_consumers
from lib.queues.topics import wire_topic
from lib.runtime.aws.http import lambda_handler_for
from lib.runtime.aws.scheduler import run_scheduled_cron
from lib.runtime.aws.secrets import load_secret_environment
from lib.runtime.aws.sqs import handle_sqs_event
from lib.runtime.functions import load_function_module

T = TypeVar("T")
ENTRYPOINT_VARIABLE = "ERMIS_AWS_ENTRYPOINT"
QUEUE_TOPIC_VARIABLE = "ERMIS_AWS_QUEUE_TOPIC"
_modules: dict[str, ModuleType] = {}
_loop: asyncio.AbstractEventLoop | None = None


def _function_module() -> ModuleType:
    entrypoint = os.environ.get(ENTRYPOINT_VARIABLE)
    if not entrypoint:
        raise RuntimeError(f"{ENTRYPOINT_VARIABLE} is not set: which api/ file does this function serve?")
    if entrypoint not in _modules:
        _modules[entrypoint] = load_function_module(PROJECT_ROOT, entrypoint)
    return _modules[entrypoint]


def _process_loop() -> asyncio.AbstractEventLoop:
    """This process's loop, made the thread's current one (where Mangum looks for it)."""
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    asyncio.set_event_loop(_loop)
    return _loop


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return _process_loop().run_until_complete(coroutine)


def _consumer() -> QueueConsumer:
    wire = os.environ.get(QUEUE_TOPIC_VARIABLE, "")
    for consumer in registered_consumers():
        if wire_topic(consumer.topic) == wire:
            return consumer
    raise RuntimeError(f"{os.environ.get(ENTRYPOINT_VARIABLE)} consumes no topic {wire!r} ({QUEUE_TOPIC_VARIABLE})")


def handler(event: dict[str, Any], context: Any) -> Any:
    load_secret_environment()  # at the cold start (a no-op after), before the module reads anything
    module = _function_module()
    records = event.get("Records") or []
    if records and records[0].get("eventSource") == "aws:sqs":
        return _run(handle_sqs_event(_consumer(), event))
    if "ermisCron" in event:
        return _run(run_scheduled_cron(module.app, str(event["ermisCron"])))
    _process_loop()
    return lambda_handler_for(module.app)(event, context)
