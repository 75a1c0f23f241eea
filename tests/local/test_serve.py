"""scripts/serve, the production process for the streams on AWS: the functions served from the
environment's own services (none started), a stream streaming, no development routes, and a
missing variable refused in one line."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import httpx

from lib.local.paths import PROJECT_ROOT
from lib.local.services import free_port
from tests.support.auth import session_headers
from tests.support.catalogs import add_draft
from tests.support.sse import capture_sse
from tests.support.waiting import eventually


def serve_env(**overrides: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "CLERK_JWT_KEY"}}
    return {**env, "PYTHONUNBUFFERED": "1", **overrides}


async def test_it_serves_the_streams_from_the_configured_services(
    db, database_url: str, redis_url: str, session_keys: tuple[str, str], mint_token: Callable[..., str]
) -> None:
    await add_draft(db, "org_a", "s1")
    port = free_port()
    env = serve_env(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        CLERK_JWT_KEY=session_keys[1],
        ERMIS_SSE_POLL_INTERVAL_MS="200",
        ERMIS_SSE_MAX_DURATION_S="3",
    )
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(PROJECT_ROOT / "scripts/serve"), "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=PROJECT_ROOT
    )
    try:

        async def answering() -> bool:
            try:
                async with httpx.AsyncClient() as client:
                    return (await client.get(f"{url}/api/feed")).status_code == 401
            except httpx.TransportError:
                return False

        assert await eventually(answering, timeout_s=60)
        headers = session_headers(mint_token(org_id="org_a", org_role="org:member"))
        capture = await capture_sse(f"{url}/api/feed/events", headers, seconds=3.0, stop_after=1)
        assert capture.status == 200 and capture.events("feed.changed")[0]["draftCount"] == 1
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/__dev/sign-in?as=super_admin")).status_code == 404
            assert (await client.get(f"{url}/admin/")).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_missing_variable_is_one_line() -> None:
    result = subprocess.run(
        [str(PROJECT_ROOT / "scripts/serve")],
        env=serve_env(),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: DATABASE_URL, CLERK_JWT_KEY must be set")


def test_a_production_server_without_what_production_needs_is_one_line(database_url: str, session_keys) -> None:
    result = subprocess.run(
        [str(PROJECT_ROOT / "scripts/serve")],
        env=serve_env(
            DATABASE_URL=database_url,
            CLERK_JWT_KEY=session_keys[1],
            ERMIS_ENV="production",
            CLERK_AUTHORIZED_PARTIES="https://news.example",
            ERMIS_PSEUDONYM_KEY="",
        ),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    [line] = [line for line in result.stderr.strip().splitlines() if line]
    assert line.startswith("ermis: refusing to start: ERMIS_PSEUDONYM_KEY must be set in production")
