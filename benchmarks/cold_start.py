"""Cold start under Vercel's bootstrap (issue 23), three tables from one run, each function next
to a bare Starlette app (``app = Starlette()``, only ``starlette`` pinned) built and booted the
same way:

1. **start → ``server-started``** per built function, in the build the project ships (bytecode
   precompiled: ``vercel.json``'s ``build.env`` sets ``VERCEL_PYTHON_COMPILEALL=1``) and, for
   comparison, in Vercel's default build (``VERCEL_PYTHON_COMPILEALL=0``);
2. **start → first response** in the shipped build, for a representative request per function
   with Postgres and Redis on loopback: a stream's first frame, a poll's or an operator GET's
   JSON, a cron's 200 with nothing to do, a queue push delivery acknowledged (the SDK's embedded
   queue service); the bare app's first response is its 404;
3. **unpacked size** per function of the shipped build, and its largest vendored packages.

Each bundle is built by ``vercel build`` (the pinned CLI, as the deployment stage builds it) and
each function is started ``ROUNDS`` times exactly as the platform starts it
(``tests.support.vercel_bootstrap``: its files unpacked, a bare Python 3.12, an emptied
environment, ``VERCEL_IPC_PATH``). Reported: medians of the rounds after the first, which warms
the page cache (as on a warm Vercel host), and their ratios to the bare app's.

Run: ``.venv/bin/python -m benchmarks.cold_start`` (needs what ``./scripts/test`` installs).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import psycopg
from vercel.queue.devserver import EmbeddedQueueDevServer, embedded_queue_dev_server

from benchmarks.services import benchmark_services
from lib.bundle import PROJECT_ROOT
from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.queues.publish import publish_message
from lib.queues.topics import RSS_QUEUE_TOPICS, wire_topic
from lib.settings import get_settings
from tests.support.catalogs import add_draft
from tests.support.queue import rss_message
from tests.support.vercel_bootstrap import RunningFunction, bare_python312
from tests.support.vercel_build import BuiltFunction, build_bundle, deploy_cache_dir

ROUNDS = 4
SHIPPED, DEFAULT = "shipped build (VERCEL_PYTHON_COMPILEALL=1)", "default build (VERCEL_PYTHON_COMPILEALL=0)"
BUILDS = {SHIPPED: {"VERCEL_PYTHON_COMPILEALL": "1"}, DEFAULT: {"VERCEL_PYTHON_COMPILEALL": "0"}}
BARE = "bare Starlette app"
# Packages reported under the one the request asked for (what imports them).
PACKAGE_FAMILIES = {
    "pydantic_core": "pydantic",
    "annotated_types": "pydantic",
    "typing_inspection": "pydantic",
    "psycopg_binary": "psycopg",
    "psycopg_pool": "psycopg",
    "cryptography": "jwt",
    "vercel": "queue SDK",
    "httpx2": "queue SDK",
    "httpcore2": "queue SDK",
    "h2": "queue SDK",
    "hpack": "queue SDK",
    "hyperframe": "queue SDK",
}
CRON_SECRET = "cold-start-cron-secret"
SIGNING_SECRET = "cold-start-signing-secret"
OIDC = {"x-vercel-oidc-token": jwt.encode({"sub": "cold-start", "exp": int(time.time()) + 86400}, "k" * 32)}


@dataclass(frozen=True)
class FirstRequest:
    """``send(url, prepared)`` is timed; ``prepare()`` runs before the function starts (a queue
    message is published and leased there, so only its delivery is timed)."""

    send: Callable[[str, Any], None]
    prepare: Callable[[], Any] = lambda: None


def bare_starlette_project(root: Path) -> Path:
    pin = next(
        line for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines() if line.startswith("starlette==")
    )
    (root / "api").mkdir(parents=True)
    (root / "api" / "bare.py").write_text("from starlette.applications import Starlette\n\napp = Starlette()\n")
    (root / "requirements.txt").write_text(pin + "\n")
    (root / ".python-version").write_text((PROJECT_ROOT / ".python-version").read_text())
    return root


def get_json(path: str, headers: dict[str, str]) -> FirstRequest:
    def request(url: str, _: Any) -> None:
        response = httpx.get(url + path, headers={**OIDC, **headers}, timeout=60)
        assert response.status_code < 500 and response.headers["content-type"].startswith("application/json"), (
            path,
            response.status_code,
            response.text,
        )

    return FirstRequest(request)


def _bare_not_found(url: str, _: Any) -> None:
    assert httpx.get(url + "/", timeout=60).status_code == 404


BARE_NOT_FOUND = FirstRequest(_bare_not_found)


def first_frame(path: str, headers: dict[str, str]) -> FirstRequest:
    def request(url: str, _: Any) -> None:
        with httpx.stream("GET", url + path, headers={**OIDC, **headers}, timeout=60) as response:
            assert response.status_code == 200, (path, response.status_code)
            received = b""
            for chunk in response.iter_raw():
                received += chunk
                if b"\r\n\r\n" in received or b"\n\n" in received:
                    return
        raise AssertionError(f"{path}: the stream ended before its first frame")

    return FirstRequest(request)


def push_delivery(function: BuiltFunction, queue: EmbeddedQueueDevServer) -> FirstRequest:
    """A fresh signed message on the function's topic, leased as Vercel's push leases it."""
    [trigger] = function.config["experimentalTriggers"]
    topic = next(logical for logical in RSS_QUEUE_TOPICS.values() if wire_topic(logical) == trigger["topic"])
    path = "/" + function.name

    def lease() -> Any:
        asyncio.run(publish_message(topic, rss_message(f"cold-{uuid.uuid4().hex}")))
        # A reserved topic's consumer retries its messages, so an earlier round's may be due
        # again: any one delivery is a delivery to time.
        return next(iter(queue.iter_push_deliveries(trigger["topic"], trigger["consumer"])))

    def request(url: str, delivery: Any) -> None:
        response = httpx.post(url + path, content=delivery.body, headers={**delivery.headers, **OIDC}, timeout=60)
        assert response.status_code == 200 and response.json() == {"acknowledged": True}, response.text

    return FirstRequest(request, lease)


async def seed_story(database_url: str) -> None:
    """The story the story routes read, in the tenant the member's session names."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
        await add_draft(db, "org_a", "s1")


def representative_requests(
    functions: dict[str, BuiltFunction], private_key: str, queue: EmbeddedQueueDevServer
) -> dict[str, FirstRequest]:
    member = {
        "cookie": "__session="
        + mint_session_token(private_key, {"sub": "u1", "org_id": "org_a", "org_role": "org:admin"}, 86400)
    }
    operator = {
        "cookie": "__session=" + mint_session_token(private_key, {"sub": "op", "platform_role": "super_admin"}, 86400)
    }
    cron = {"authorization": f"Bearer {CRON_SECRET}"}
    requests: dict[str, FirstRequest] = {}
    for name, function in functions.items():
        path = "/" + name.removesuffix("/index").replace("[storyId]", "s1")
        if function.config.get("experimentalTriggers"):
            requests[name] = push_delivery(function, queue)
        elif name.endswith("/events"):
            requests[name] = first_frame(path, member)
        elif path in {
            "/api/admin/audit",
            "/api/admin/crons",
            "/api/admin/dead-letters",
            "/api/admin/flags",
            "/api/admin/queues",
        }:
            requests[name] = get_json(path, operator)
        elif name.startswith("api/admin/"):
            requests[name] = get_json(path, cron)
        else:
            requests[name] = get_json(path, member)
    return requests


def measure(
    function: BuiltFunction, python: Path, scratch: Path, env: dict[str, str], request: FirstRequest | None
) -> tuple[float, float | None]:
    """Median start → ``server-started`` and start → first response, over the rounds after the first."""
    starts, responses = [], []
    for round_number in range(ROUNDS):
        task_dir = scratch / f"{function.name.replace('/', '_')}-{uuid.uuid4().hex[:8]}"
        prepared = request.prepare() if request is not None else None
        with RunningFunction(function, task_dir, python, env) as running:
            answered = time.perf_counter()
            if request is not None:
                request.send(running.url, prepared)
            answered = time.perf_counter() - answered
            if round_number:
                starts.append(running.boot_seconds)
                responses.append(running.boot_seconds + answered)
    return statistics.median(starts), statistics.median(responses) if request is not None else None


def _import_lines(function: BuiltFunction, python: Path, task_dir: Path, env: dict[str, str], send: Any) -> list[str]:
    with RunningFunction(function, task_dir, python, {**env, "PYTHONPROFILEIMPORTTIME": "1"}) as running:
        if send is not None:
            send(running.url)
        time.sleep(0.2)  # let the process finish writing
        output = running.output()
    return [line for line in output.splitlines() if line.startswith("import time:") and line.count("|") == 2]


def first_request_imports(
    function: BuiltFunction, python: Path, scratch: Path, env: dict[str, str], request: FirstRequest
) -> Counter[str]:
    """Milliseconds of importing, by top-level package, that the first request paid: two more
    boots with ``PYTHONPROFILEIMPORTTIME=1`` (written to the process's own stderr), one without
    a request and one with; a module is imported once, so what only the second shows, the
    request imported. Self times, so nothing counts twice."""
    name = function.name.replace("/", "_")
    at_start = {
        line.rsplit("|", 1)[1].strip() for line in _import_lines(function, python, scratch / f"{name}-i0", env, None)
    }
    prepared = request.prepare()
    with_request = _import_lines(function, python, scratch / f"{name}-i1", env, lambda url: request.send(url, prepared))
    by_package = Counter[str]()
    for line in with_request:
        self_us, _, module = line.removeprefix("import time:").split("|")
        if module.strip() not in at_start and self_us.strip().isdigit():
            top = module.strip().split(".")[0]
            by_package[PACKAGE_FAMILIES.get(top, top)] += int(self_us) / 1000
    return by_package


def unpacked_size(function: BuiltFunction) -> tuple[int, Counter[str]]:
    """Bytes of every file the platform unpacks for the function, and per vendored package."""
    total, by_package = 0, Counter[str]()
    for target, source in function.file_path_map.items():
        size = (function.project / source).stat().st_size
        total += size
        parts = target.split("/")
        if parts[0] == "_vendor" and len(parts) > 2:
            by_package[parts[1].split("-")[0].removesuffix(".dist")] += size
    for path in function.directory.rglob("*"):
        if path.is_file():
            total += path.stat().st_size
    return total, by_package


def ratio_table(
    title: str, rows: dict[str, dict[str, float]], labels: list[str], notes: dict[str, str] | None = None
) -> None:
    print(f"\n### {title}\n")
    note_header = " | what the first request imported" if notes is not None else ""
    print(f"| function | {' | '.join(f'{label} | x bare' for label in labels)}{note_header} |")
    print("|---" * (1 + 2 * len(labels) + (notes is not None)) + "|")
    first = labels[0]
    for name in sorted(rows[first], key=lambda name: (name != BARE, rows[first][name])):
        cells = [
            f"{rows[label][name] * 1000:,.0f} ms | {rows[label][name] / rows[label][BARE]:.2f}" for label in labels
        ]
        note = f" | {notes.get(name, '')}" if notes is not None else ""
        print(f"| `{name}` | {' | '.join(cells)}{note} |")
    ratios = [rows[first][name] / rows[first][BARE] for name in rows[first] if name != BARE]
    print(f"\nmedian x bare ({first}): {statistics.median(ratios):.2f}; largest: {max(ratios):.2f}")


def main() -> None:
    python = bare_python312(deploy_cache_dir() / "python3.12-bare")
    starts: dict[str, dict[str, float]] = {label: {} for label in BUILDS}
    responses: dict[str, float] = {}
    sizes: dict[str, tuple[int, Counter[str]]] = {}
    import_notes: dict[str, str] = {}
    with (
        tempfile.TemporaryDirectory(prefix="cold-start-") as scratch_name,
        benchmark_services() as (database_url, redis_url),
        embedded_queue_dev_server(manual_clock=False) as queue,
    ):
        scratch = Path(scratch_name)
        asyncio.run(seed_story(database_url))
        private_key, public_key = ensure_dev_key_pair(scratch / "keys")
        environment = {
            "VERCEL": "1",
            "VERCEL_REGION": "arn1",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "CRON_SECRET": CRON_SECRET,
            "CLERK_JWT_KEY": public_key,
            "ERMIS_QUEUE_SIGNING_SECRET": SIGNING_SECRET,
            "VERCEL_QUEUE_BASE_URL": queue.base_url,
        }
        # This process publishes the messages the queue functions receive, signed as they verify.
        os.environ.update(
            ERMIS_QUEUE_SIGNING_SECRET=SIGNING_SECRET,
            VERCEL_QUEUE_BASE_URL=queue.base_url,
            VERCEL_QUEUE_API_TOKEN="local-token",  # noqa: S106 - the embedded service accepts any token
            VERCEL_REGION="arn1",
        )
        get_settings.cache_clear()
        bare_source = bare_starlette_project(scratch / "bare-source")
        for index, (label, build_env) in enumerate(BUILDS.items()):
            bare = build_bundle(bare_source, scratch / f"bare-{index}", build_env)
            bundle = build_bundle(PROJECT_ROOT, scratch / f"bundle-{index}", build_env)
            shipped = label == SHIPPED
            requests = representative_requests(bundle.functions, private_key, queue) if shipped else {}
            tasks = scratch / f"tasks-{index}"
            bare_404 = BARE_NOT_FOUND if shipped else None
            starts[label][BARE], bare_response = measure(
                bare.functions["api/bare"], python, tasks, environment, bare_404
            )
            if shipped:
                responses[BARE] = bare_response or 0.0
                sizes[BARE] = unpacked_size(bare.functions["api/bare"])
            for name, function in bundle.functions.items():
                starts[label][name], response = measure(function, python, tasks, environment, requests.get(name))
                if shipped:
                    responses[name] = response or 0.0
                    sizes[name] = unpacked_size(function)
                    imported = first_request_imports(function, python, tasks, environment, requests[name])
                    import_notes[name] = f"{sum(imported.values()):,.0f} ms: " + ", ".join(
                        f"{package} {ms:,.0f}" for package, ms in imported.most_common(4)
                    )
    ratio_table("Start → server-started", starts, list(BUILDS))
    ratio_table(f"Start → first response ({SHIPPED})", {"first response": responses}, ["first response"], import_notes)
    print(f"\n### Unpacked size ({SHIPPED})\n")
    print("| function | unpacked | largest vendored packages |")
    print("|---|---|---|")
    for name, (total, by_package) in sorted(sizes.items(), key=lambda item: item[1][0]):
        largest = ", ".join(f"{package} {size / 2**20:.1f} MB" for package, size in by_package.most_common(5))
        print(f"| `{name}` | {total / 2**20:.1f} MB | {largest} |")


if __name__ == "__main__":
    main()
