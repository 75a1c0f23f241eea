"""/api/admin/erasure/purge: due requests purged serially, a concurrent cancel is not a
failure, a failing purge is reported and isolated; and the operator CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest

from lib.jobs.erasure_purge import purge_due_data_erasure_requests
from lib.jobs.schedule import cron_name
from lib.local.paths import PROJECT_ROOT
from lib.platform.erasure import create_data_erasure_request, get_data_erasure_request
from tests.support.auth import cron_headers, session_headers
from tests.support.db import notification_written_back, table_refusing
from tests.support.functions import client_for, load_api_app
from tests.support.reliability import record

# What the purge also counts, untouched in these cases: the channels, the Redis retry entries and keys.
UNTOUCHED = {"stream_channels": 0, "redis:ai-ledger-retry-entries": 0, "redis:keys": 0}

PATH = "/api/admin/erasure/purge"


async def test_due_requests_are_purged_and_reported(db, mint_token: Callable[..., str]) -> None:
    await db.execute(
        "INSERT INTO notifications (id, user_id, type) VALUES ('n1', 'u1', 'system'), ('n2', 'u2', 'note')"
    )
    first = await create_data_erasure_request("u1", timedelta(0))
    second = await create_data_erasure_request("u2", timedelta(0))
    await create_data_erasure_request("u3", timedelta(days=3))
    app = load_api_app("api/admin/erasure/purge.py")
    async with client_for(app) as client:
        assert (await client.get(PATH)).status_code == 401
        ops = session_headers(mint_token(platform_role="ops"))
        assert (await client.post(PATH, headers=ops)).status_code == 403
        body = (await client.get(PATH, headers=cron_headers())).json()
        assert (body["due"], body["purged"], body["failed"]) == (2, 2, 0)
        assert {item["id"]: item["status"] for item in body["results"]} == {first.id: "purged", second.id: "purged"}
        assert body["results"][0]["counts"] == {
            "notifications": 1,
            "stream_changes": 1,
            "ai_usage_ledger": 0,
            **UNTOUCHED,
        }
        assert body["processedAt"].endswith("Z")
        compliance = session_headers(mint_token(platform_role="compliance"))
        assert (await client.post(PATH, headers=compliance)).json()["due"] == 0
    assert (await (await db.execute("SELECT count(*) FROM notifications")).fetchone())[0] == 0


async def test_a_request_cancelled_between_list_and_confirm_is_not_a_failure(db, database_url: str) -> None:
    request = await create_data_erasure_request("u1", timedelta(0))
    async with await psycopg.AsyncConnection.connect(database_url) as operator:
        # The operator holds the request while the cron lists it and waits to confirm it...
        await operator.execute("SELECT 1 FROM data_erasure_requests WHERE id = %s FOR UPDATE", (request.id,))
        purge = asyncio.create_task(purge_due_data_erasure_requests())
        for _ in range(200):
            waiting = await (
                await operator.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND query LIKE '%%FOR UPDATE%%'"
                )
            ).fetchone()
            if waiting[0]:
                break
            await asyncio.sleep(0.02)
        # ...then cancels it.
        await operator.execute("UPDATE data_erasure_requests SET status = 'cancelled' WHERE id = %s", (request.id,))
        await operator.commit()
        result = await asyncio.wait_for(purge, timeout=10)
    assert (result["due"], result["purged"], result["failed"]) == (1, 0, 0)
    assert result["results"] == [{"id": request.id, "status": "skipped"}]
    assert (await get_data_erasure_request(request.id)).status == "cancelled"


async def test_one_failing_purge_is_reported_once_and_the_rest_go_on(db, capsys: pytest.CaptureFixture[str]) -> None:
    await db.execute("INSERT INTO ai_usage_ledger (id, user_id) VALUES ('l1', 'u_bad')")
    bad = await create_data_erasure_request("u_bad", timedelta(0))
    good = await create_data_erasure_request("u_good", timedelta(0))
    async with table_refusing(db, "ai_usage_ledger"):
        result = await purge_due_data_erasure_requests()
    assert (result["due"], result["purged"], result["failed"]) == (2, 1, 1)
    statuses = {item["id"]: item["status"] for item in result["results"]}
    assert statuses == {bad.id: "failed", good.id: "purged"}
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert [(line["context"], line["failed"]) for line in lines] == [("gdpr-erasure-purge", 1)]
    assert (await get_data_erasure_request(bad.id)).status == "pending"


async def test_the_operator_cli_runs_the_lifecycle(db, database_url: str) -> None:
    await db.execute("INSERT INTO notifications (id, user_id, type) VALUES ('n1', 'u_cli', 'system')")

    def erasure(*args: str) -> tuple[int, object]:
        result = subprocess.run(
            [str(PROJECT_ROOT / "scripts/erasure"), *args],
            cwd=PROJECT_ROOT,
            env={**os.environ, "DATABASE_URL": database_url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.returncode, json.loads(result.stdout)

    code, created = await asyncio.to_thread(erasure, "create", "u_cli", "--grace-days", "7")
    assert code == 0 and created["status"] == "pending"
    code, listed = await asyncio.to_thread(erasure, "list")
    assert (code, listed) == (0, [])
    code, confirmed = await asyncio.to_thread(erasure, "confirm", created["id"])
    assert code == 0 and confirmed["purge_counts"] == {
        "notifications": 1,
        "stream_changes": 1,
        "ai_usage_ledger": 0,
        **UNTOUCHED,
    }
    code, again = await asyncio.to_thread(erasure, "cancel", created["id"])
    assert (code, again) == (1, {"cancelled": False})
    code, bad = await asyncio.to_thread(erasure, "show", "not-a-uuid")
    assert code == 2 and "error" in bad


@pytest.mark.reliability
async def test_a_purge_killed_mid_transaction_changes_nothing_and_the_next_run_purges_once(
    db, database_url: str
) -> None:
    """SIGKILL after the notifications are deleted, while the ledger is locked: all rolled back."""
    from tests.support.processes import bundle_process, output_of, sigkill
    from tests.support.waiting import eventually

    await db.execute("INSERT INTO notifications (id, user_id, type) VALUES ('n1', 'u1', 'system')")
    await db.execute("INSERT INTO ai_usage_ledger (id, user_id, model) VALUES ('l1', 'u1', 'm')")
    request = await create_data_erasure_request("u1", timedelta(0))
    async with await psycopg.AsyncConnection.connect(database_url) as blocker:
        await blocker.execute("LOCK TABLE ai_usage_ledger IN EXCLUSIVE MODE")  # the purge's second table
        with bundle_process("purge_due_data_erasure_requests()", "lib.jobs.erasure_purge") as child:

            async def purge_waits_on_the_ledger() -> bool:  # its delete of notifications is in
                waiting = await (
                    await db.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND query LIKE '%%ai_usage_ledger%%'"
                    )
                ).fetchone()
                return waiting[0] > 0

            assert await eventually(purge_waits_on_the_ledger), output_of(child)
            sigkill(child)
        await blocker.rollback()
    assert (await get_data_erasure_request(request.id)).status == "pending"
    assert (await (await db.execute("SELECT count(*) FROM notifications")).fetchone()) == (1,)

    result = await purge_due_data_erasure_requests()
    assert (result["due"], result["purged"], result["failed"]) == (1, 1, 0)
    purged = await get_data_erasure_request(request.id)
    assert purged.status == "purged"
    assert purged.purge_counts == {"notifications": 1, "stream_changes": 1, "ai_usage_ledger": 1, **UNTOUCHED}
    again = await purge_due_data_erasure_requests()
    lost = int(purged.status != "purged")
    record("kills", "erasure purge, mid-transaction", entries=1, lost=lost, doubled=again["purged"])
    assert again["due"] == 0  # never purged twice


async def test_a_purge_whose_verification_finds_the_person_left_is_a_failed_run_on_the_console(db, redis) -> None:
    """The run answers 200 with the request ``failed`` and its leftovers; the cron history — the
    console's cron card — records the run failed, saying how many."""
    await db.execute("INSERT INTO notifications (id, user_id, type) VALUES ('n1', 'u_left', 'system')")
    request = await create_data_erasure_request("u_left", timedelta(0))
    app = load_api_app("api/admin/erasure/purge.py")
    async with client_for(app) as client, notification_written_back(db, "u_left"):
        body = (await client.get(PATH, headers=cron_headers())).json()
    assert (body["due"], body["purged"], body["failed"]) == (1, 0, 1)
    assert body["results"] == [
        {
            "id": request.id,
            "status": "failed",
            "counts": body["results"][0]["counts"],
            "leftovers": {"notifications": 1},
        }
    ]
    run = await (
        await db.execute("SELECT status, http_status, error FROM cron_runs WHERE job = %s", (cron_name(PATH),))
    ).fetchone()
    assert run[:2] == ("failed", 200) and run[2].startswith("1 failed")
    assert (await get_data_erasure_request(request.id)).status == "failed"
