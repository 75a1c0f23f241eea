"""``scripts/pipeline enable|disable|status``: the spec's "Turning the pipeline on", automated.

    enable   refuse unless the queue signing secret is set; flip ``rssQueuePipeline`` on; fire
             one refresh tick; confirm ``published: true`` and that the ``rss.ingest`` consumer
             ran that batch (the line ``[queues:rss.ingest] running aggregation refresh
             batch=<id>`` is printed once the consumer has recorded it)
    disable  flip the flag off (the inline path never stopped being authoritative for tenants)
    status   the flag (global and overrides), provisioning and region as the functions decide them
             (from ``/api/admin/queues``), and the DLQ topics' depth where the queue service tells
             it (the local one does)

Targets the dev server by default (URL, cron secret and database from its session file, and a
development super_admin token). For a deployment pass ``--url`` and set ``ERMIS_ADMIN_TOKEN``
(a super_admin session), ``CRON_SECRET`` and ``DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import httpx
import psycopg

from lib.local.dev_keys import ensure_dev_key_pair, mint_session_token
from lib.local.paths import dev_key_dir, dev_session
from lib.ops.cli import ScriptError, run_script
from lib.queues.handlers import LAST_INGEST_RUN_KEY

FLAG = "rssQueuePipeline"
CONFIRM_SECONDS = 90


class PipelineError(ScriptError):
    pass


def _admin_token(session: dict[str, Any]) -> str:
    token = os.environ.get("ERMIS_ADMIN_TOKEN")
    if token:
        return token
    if not session:
        raise PipelineError("set ERMIS_ADMIN_TOKEN (a super_admin session) or start scripts/dev")
    private_pem, _ = ensure_dev_key_pair(dev_key_dir())
    return mint_session_token(private_pem, {"sub": "pipeline-runbook", "platform_role": "super_admin"}, 600)


async def _set_flag(client: httpx.AsyncClient, token: str, enabled: bool) -> None:
    response = await client.put(
        "/api/admin/flags", json={"key": FLAG, "enabled": enabled}, headers={"Authorization": f"Bearer {token}"}
    )
    if response.status_code != 200:
        raise PipelineError(f"setting {FLAG} failed: {response.status_code} {response.text}")


def _last_run(database_url: str) -> dict[str, Any] | None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT value FROM platform_state WHERE key = %s", (LAST_INGEST_RUN_KEY,)).fetchone()
    return None if row is None else row[0]


async def enable(client: httpx.AsyncClient, session: dict[str, Any]) -> None:
    if not (os.environ.get("ERMIS_QUEUE_SIGNING_SECRET") or session.get("queueSigningSecretSet")):
        raise PipelineError("ERMIS_QUEUE_SIGNING_SECRET is not set: set it first, or every message will be rejected")
    cron_secret = os.environ.get("CRON_SECRET") or session.get("cronSecret")
    database_url = os.environ.get("DATABASE_URL") or session.get("databaseUrl")
    if not cron_secret or not database_url:
        raise PipelineError("CRON_SECRET and DATABASE_URL are needed to fire and confirm a tick")
    await _set_flag(client, _admin_token(session), True)
    print(f"{FLAG}: on")
    response = await client.get("/api/admin/rss/refresh", headers={"Authorization": f"Bearer {cron_secret}"})
    body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    if response.status_code != 200 or body.get("published") is not True:
        raise PipelineError(f"the refresh did not publish: {response.status_code} {response.text}")
    batch = body["batchId"]
    print(f"refresh: published: true batch={batch}")
    deadline = time.monotonic() + CONFIRM_SECONDS
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(_last_run, database_url)
        if last and last.get("batchId") == batch:
            print(f"[queues:rss.ingest] running aggregation refresh batch={batch} (completed {last['completedAt']})")
            return
        await asyncio.sleep(1)
    raise PipelineError(f"the rss.ingest consumer did not report batch {batch} within {CONFIRM_SECONDS} s")


async def status(client: httpx.AsyncClient, session: dict[str, Any]) -> None:
    admin = {"Authorization": f"Bearer {_admin_token(session)}"}
    response = await client.get("/api/admin/flags", headers=admin)
    if response.status_code != 200:
        raise PipelineError(f"reading flags failed: {response.status_code} {response.text}")
    flag = next(item for item in response.json()["flags"] if item["key"] == FLAG)
    print(f"{FLAG}: {'on' if flag['enabled'] else 'off'} (overrides: {flag['overrides'] or 'none'})")
    # Asked of a function, not decided here: on Vercel the token arrives with each request.
    health = await client.get("/api/admin/queues", headers=admin)
    if health.status_code != 200:
        raise PipelineError(f"reading the queue view failed: {health.status_code} {health.text}")
    pipeline = health.json()["pipeline"]
    print(f"provisioned (as the functions decide): {pipeline['provisioned']}; region: {pipeline['region']}")
    depths = await client.get("/__dev/queues")
    if depths.status_code == 200:
        topics = depths.json()["topics"]
        for topic in ("rss-ingest-dlq", "rss-enrich-dlq", "rss-cluster-dlq", "rss-synthesize-dlq"):
            print(f"{topic}: {topics.get(topic, {}).get('messages', 0)} message(s)")
    else:
        print("DLQ depth: not reported by this queue service")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/pipeline", description="Turn the RSS queue pipeline on or off.")
    parser.add_argument("command", choices=["enable", "disable", "status"])
    parser.add_argument("--url", help="the deployment (default: the running dev server)")
    args = parser.parse_args(argv)
    session = dev_session()
    base_url = args.url or session.get("url") or "http://127.0.0.1:3000"

    async def run() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=330) as client:
            if args.command == "enable":
                await enable(client, session)
            elif args.command == "disable":
                await _set_flag(client, _admin_token(session), False)
                print(f"{FLAG}: off")
            else:
                await status(client, session)

    def run_command() -> int:
        asyncio.run(run())
        return 0

    return run_script(run_command)


if __name__ == "__main__":
    raise SystemExit(main())
