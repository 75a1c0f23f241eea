"""The built functions under Vercel's own bootstrap (``vc__handler__python`` in IPC mode, only
what the build vendored, an emptied environment), against real Postgres, Redis and the SDK's
embedded queue service — with ``VERCEL=1``, no ``VERCEL_OIDC_TOKEN`` in the environment and the
OIDC token on each request, as the platform sends it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import httpx
import jwt
import pytest
from vercel.queue.devserver import EmbeddedQueueDevServer, embedded_queue_dev_server

from lib.bundle import PROJECT_ROOT
from lib.http.security_headers import SECURITY_HEADERS
from lib.local.routing import discover_routes
from lib.queues.handlers import LAST_INGEST_RUN_KEY
from tests.support.auth import TEST_CRON_SECRET, cron_headers, session_headers
from tests.support.catalogs import add_draft
from tests.support.sse import capture_sse
from tests.support.vercel_bootstrap import FunctionBootError, RunningFunction
from tests.support.vercel_build import BuildOutput

API_FILES = sorted(route.file for route in discover_routes(PROJECT_ROOT))
OIDC = {"x-vercel-oidc-token": jwt.encode({"sub": "deploy-stage", "exp": int(time.time()) + 86400}, "k" * 32)}
SIGNING_SECRET = "deploy-stage-signing-secret"

BootFunction = Callable[..., AbstractContextManager[RunningFunction]]


@pytest.fixture(scope="module")
def queue_service() -> Iterator[EmbeddedQueueDevServer]:
    with embedded_queue_dev_server(manual_clock=False) as server:
        yield server


@pytest.fixture
def boot(
    vercel_output: BuildOutput,
    runtime_python: Path,
    database_url: str,
    redis_url: str,
    session_keys: tuple[str, str],
    queue_service: EmbeddedQueueDevServer,
    tmp_path: Path,
) -> BootFunction:
    """``with boot("api/feed/events.py") as fn:`` — the built function, running."""
    environment = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CRON_SECRET": TEST_CRON_SECRET,
        "CLERK_JWT_KEY": session_keys[1],
        "ERMIS_QUEUE_SIGNING_SECRET": SIGNING_SECRET,
        "VERCEL": "1",
        "VERCEL_REGION": "arn1",
        "VERCEL_QUEUE_BASE_URL": queue_service.base_url,
        "ERMIS_SSE_POLL_INTERVAL_MS": "200",
        "ERMIS_SSE_MAX_DURATION_S": "5",
    }

    @contextmanager
    def start(file: str, leave_out: tuple[str, ...] = ()) -> Iterator[RunningFunction]:
        function = vercel_output.function_for_file(file)
        task_dir = tmp_path / function.name.replace("/", "_")
        with RunningFunction(function, task_dir, runtime_python, environment, leave_out) as running:
            try:
                yield running
            except BaseException:
                print(running.output())  # the function's own logs next to a failing assertion
                raise

    return start


@pytest.mark.parametrize("file", API_FILES)
def test_every_function_boots_and_answers_a_bare_request(boot: BootFunction, file: str) -> None:
    path = "/" + file.removesuffix(".py").removesuffix("/index").replace("[storyId]", "s1")
    with boot(file) as running:
        for method in ("GET", "POST"):
            response = httpx.request(method, running.url + path, headers=OIDC, timeout=30)
            assert response.status_code < 500, (method, response.status_code, response.text)
            assert response.headers["content-type"].startswith("application/json"), response.headers
            assert {name: response.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS


async def test_the_feed_stream_delivers_a_change_made_while_it_is_open(db, boot: BootFunction, mint_token) -> None:
    await add_draft(db, "org_a", "s1")
    headers = {**OIDC, **session_headers(mint_token(org_id="org_a", org_role="org:member"))}

    async def write_later() -> None:
        await asyncio.sleep(1.0)
        await add_draft(db, "org_a", "s2")

    with boot("api/feed/events.py") as running:
        writer = asyncio.create_task(write_later())
        capture = await capture_sse(f"{running.url}/api/feed/events", headers, seconds=4.0, stop_after=2)
        await writer
    assert capture.status == 200 and capture.headers["content-type"].startswith("text/event-stream")
    assert [change["draftCount"] for change in capture.events("feed.changed")] == [1, 2]


async def test_the_story_stream_finds_its_story_in_the_query_or_the_path(db, boot: BootFunction, mint_token) -> None:
    await add_draft(db, "org_a", "s1")
    headers = {**OIDC, **session_headers(mint_token(org_id="org_a", org_role="org:member"))}
    with boot("api/stories/[storyId]/events.py") as running:
        for path in ("/api/stories/s1/events?storyId=s1", "/api/stories/%5BstoryId%5D/events?storyId=s1"):
            capture = await capture_sse(running.url + path, headers, seconds=4.0, stop_after=1)
            assert capture.status == 200, path
            assert capture.events("story.phase")[0]["storyId"] == "s1", path


async def test_flags_on_then_the_cron_publishes_and_the_push_runs_the_ingest_consumer(
    db, boot: BootFunction, mint_token, vercel_output: BuildOutput, queue_service: EmbeddedQueueDevServer
) -> None:
    admin = {**OIDC, **session_headers(mint_token(platform_role="super_admin"))}
    with boot("api/admin/flags.py") as flags:
        enabled = httpx.put(
            f"{flags.url}/api/admin/flags", json={"key": "rssQueuePipeline", "enabled": True}, headers=admin
        )
        assert enabled.status_code == 200, enabled.text
    with boot("api/admin/rss/refresh.py") as refresh:
        tick = httpx.get(f"{refresh.url}/api/admin/rss/refresh", headers={**OIDC, **cron_headers()}, timeout=120)
        assert tick.status_code == 200, tick.text
        assert tick.json()["published"] is True
        # No token of any kind on the platform: publishing raises (reported, never in-process);
        # the tick goes on inline.
        tokenless = httpx.get(f"{refresh.url}/api/admin/rss/refresh", headers=cron_headers(), timeout=120)
        assert tokenless.status_code == 200 and tokenless.json()["published"] is False
        assert tokenless.json()["publishError"].startswith("QueueNotProvisioned")
        assert "QueueNotProvisioned" in refresh.output()
    batch = tick.json()["batchId"]

    [trigger] = vercel_output.function_for_file("api/queues/rss/ingest.py").config["experimentalTriggers"]
    with boot("api/queues/rss/ingest.py") as ingest:
        for misnamed in queue_service.iter_push_deliveries(trigger["topic"], "rss-ingest"):
            refused = httpx.post(
                f"{ingest.url}/api/queues/rss/ingest", content=misnamed.body, headers={**misnamed.headers, **OIDC}
            )
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "consumer_mismatch"
        [delivery] = list(queue_service.iter_push_deliveries(trigger["topic"], trigger["consumer"]))
        pushed = httpx.post(
            f"{ingest.url}/api/queues/rss/ingest",
            content=delivery.body,
            headers={**delivery.headers, **OIDC},
            timeout=120,
        )
        assert pushed.status_code == 200 and pushed.json() == {"acknowledged": True}, pushed.text
        assert f"running aggregation refresh batch={batch}" in ingest.output()
    last_run = await (
        await db.execute("SELECT value FROM platform_state WHERE key = %s", (LAST_INGEST_RUN_KEY,))
    ).fetchone()
    assert last_run[0]["batchId"] == batch


def test_a_function_missing_a_vendored_package_fails_to_boot(boot: BootFunction) -> None:
    """What the stage catches: a dependency the build did not vendor (the whole bundle, before
    requirements.txt was read, failed so)."""
    with (
        pytest.raises(FunctionBootError, match="No module named 'starlette'"),
        boot("api/feature-flags.py", leave_out=("_vendor/starlette/",)),
    ):
        pass


async def test_the_console_reads_cron_health_from_the_deployed_vercel_json(db, boot: BootFunction, mint_token) -> None:
    ops = {**OIDC, **session_headers(mint_token(platform_role="ops"))}
    with boot("api/admin/state/cleanup.py") as cleanup:
        ran = httpx.get(f"{cleanup.url}/api/admin/state/cleanup", headers={**OIDC, **cron_headers()}, timeout=30)
        assert ran.status_code == 200
    with boot("api/admin/crons.py") as crons:
        response = httpx.get(f"{crons.url}/api/admin/crons", headers=ops, timeout=30)
    assert response.status_code == 200, response.text
    jobs = {job["name"]: job for job in response.json()["jobs"]}
    assert len(jobs) == 5 and jobs["state-cleanup"]["runs"][0]["status"] == "succeeded"
