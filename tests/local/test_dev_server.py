"""scripts/dev end to end, as a newcomer runs it: embedded Postgres and Redis (no URLs given),
every function served, gates answering, the daily cleanup cron firing by itself on a
simulated clock, scripts/cron and scripts/dev-token working against it, a taken port
refused in one line, and nothing left running after SIGTERM."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator

import httpx
import psutil
import psycopg
import pytest

from lib.local.dev_keys import ensure_dev_key_pair
from tests.support.contract import CLEANUP_RESPONSE_FIELDS
from tests.support.devserver import DevServer, dev_token, run_script, running_dev_server, service_pids


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    data_dir = tmp_path_factory.mktemp("dev-data")
    with running_dev_server(data_dir, "--cron-clock-start", "2026-01-01T02:59:45+00:00") as server:
        yield server
    leftovers = [psutil.Process(pid).cmdline() for pid in service_pids(data_dir)]
    assert leftovers == [], "embedded services outlived scripts/dev"


def secret_from(server: DevServer, name: str) -> str:
    return server.wait_for(rf"generated {name}=(\S+)", 1).group(1)


def test_serves_every_function_and_the_cleanup_cron_fires_on_schedule(dev_server: DevServer) -> None:
    for file in ("api/admin/state/cleanup.py", "api/stories/[storyId]/events.py", "api/queues/rss/ingest.py"):
        dev_server.wait_for(re.escape(f"<- {file}"), 1)
    with psycopg.connect(dev_server.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO platform_state (key, value, expires_at) VALUES"
            " ('smoke:expired:1', '1', now() - interval '1 day'),"
            " ('smoke:expired:2', '2', now() - interval '1 day'),"
            " ('smoke:live', '3', NULL)"
        )
    # The simulated clock started at 02:59:45; 03:00:00 comes 15 s later, by itself.
    fired = dev_server.wait_for(r"\[cron\] 2026-01-01T03:00:00\.000Z state-cleanup GET \S+ -> (\d+) (.*)$", 60)
    assert fired.group(1) == "200"
    assert json.loads(fired.group(2))["deleted"] == 2
    with psycopg.connect(dev_server.database_url) as conn:
        keys = [row[0] for row in conn.execute("SELECT key FROM platform_state WHERE key LIKE 'smoke:%'")]
    assert keys == ["smoke:live"]


def test_gates_answer_as_the_contract_says(dev_server: DevServer) -> None:
    path = f"{dev_server.url}/api/admin/state/cleanup"
    cron_secret = secret_from(dev_server, "CRON_SECRET")
    ok = httpx.get(path, headers={"Authorization": f"Bearer {cron_secret}"})
    assert ok.status_code == 200
    assert set(ok.json()) == CLEANUP_RESPONSE_FIELDS
    assert httpx.get(path).status_code == 401
    assert httpx.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401

    ops = dev_token(dev_server, "--platform-role", "ops")
    assert httpx.post(path, headers={"Authorization": f"Bearer {ops}"}).status_code == 200
    billing = dev_token(dev_server, "--platform-role", "billing")
    assert httpx.post(path, headers={"Authorization": f"Bearer {billing}"}).status_code == 403
    assert httpx.post(path).status_code == 401
    assert httpx.delete(path).status_code == 405
    assert httpx.get(f"{dev_server.url}/api/nowhere").json()["error"]["code"] == "not_found"


def test_scripts_cron_fires_one_cron_now(dev_server: DevServer) -> None:
    result = run_script(dev_server, "cron", "state-cleanup")
    assert result.returncode == 0, result.stderr
    assert "state-cleanup GET /api/admin/state/cleanup -> 200" in result.stdout
    assert '"deletedHashRecords"' in result.stdout


def test_seeded_demo_shows_stories_on_the_first_tick(dev_server: DevServer) -> None:
    seeded = run_script(dev_server, "seed")
    assert seeded.returncode == 0, seeded.stderr
    assert "scripts/dev-token --sub user_demo_owner" in seeded.stdout
    tick = run_script(dev_server, "cron", "rss-refresh")
    assert tick.returncode == 0, tick.stdout + tick.stderr
    body = json.loads(tick.stdout.splitlines()[-1])
    assert body["tenantIngestion"]["refreshed"] == 3 and body["tenantIngestion"]["failed"] == 0
    with psycopg.connect(dev_server.database_url) as conn:
        drafts = dict(
            conn.execute("SELECT tenant_scope_id, count(*) FROM editorial_story_drafts GROUP BY 1").fetchall()
        )
        alerts = conn.execute("SELECT tenant_scope_id FROM alert_history").fetchall()
    assert set(drafts) == {"org_demo_news", "org_demo_wire", "org_demo_tech"}
    assert drafts["org_demo_news"] < 7  # two world feeds' reports of the same stories were clustered
    assert ("org_demo_news",) in [tuple(row) for row in alerts]


def test_pipeline_runbook_turns_the_queue_pipeline_on_end_to_end(dev_server: DevServer) -> None:
    def pipeline(*args: str) -> subprocess.CompletedProcess:
        return run_script(dev_server, "pipeline", *args)

    status = pipeline("status")
    assert status.returncode == 0, status.stderr
    assert "rssQueuePipeline: off" in status.stdout and "rss-ingest-dlq: 0 message(s)" in status.stdout
    assert "provisioned (as the functions decide): True; region: iad1" in status.stdout
    enabled = pipeline("enable")
    assert enabled.returncode == 0, enabled.stdout + enabled.stderr
    batch = re.search(r"published: true batch=(\S+)", enabled.stdout).group(1)
    assert f"[queues:rss.ingest] running aggregation refresh batch={batch}" in enabled.stdout
    # A real push delivery over HTTP from the embedded queue service to the consumer route:
    dev_server.wait_for(
        r"\[queue\] push rss-ingest delivery 1 as api_Squeues_Srss_Singest_Dpy -> /api/queues/rss/ingest 200", 30
    )
    dev_server.wait_for(rf"\[queues:rss.ingest\] running aggregation refresh batch={batch}", 30)
    assert "rssQueuePipeline: on" in pipeline("status").stdout
    assert pipeline("disable").returncode == 0
    assert "rssQueuePipeline: off" in pipeline("status").stdout


def test_a_taken_port_is_one_clear_line(dev_server: DevServer) -> None:
    result = run_script(dev_server, "dev", timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert re.fullmatch(r"error: port \d+ on 127\.0\.0\.1 is already in use; .*\n", result.stderr)


def test_it_prints_the_console_the_demo_and_a_sign_in_that_works(dev_server: DevServer) -> None:
    console = dev_server.wait_for(r"operations console: (\S+)", 1).group(1)
    assert console == f"{dev_server.url}/admin/"
    assert dev_server.wait_for(r"realtime demo: +(\S+)", 1).group(1) == f"{dev_server.url}/realtime-demo.html"
    sign_in = dev_server.wait_for(r"sign in: +(\S+)", 1).group(1)
    page = httpx.get(console)
    assert page.status_code == 200 and "ErmisAI operations" in page.text
    assert httpx.get(f"{dev_server.url}/admin").text == page.text  # with or without the slash, as on Vercel
    with httpx.Client() as browser:
        landed = browser.get(sign_in, follow_redirects=True)
        assert landed.url == console and "__session" in browser.cookies
        crons = browser.get(f"{dev_server.url}/api/admin/crons")  # the cookie alone authenticates
    assert crons.status_code == 200 and len(crons.json()["jobs"]) == 5


@pytest.mark.parametrize(
    ("query", "status", "location"),
    [
        ("as=ops&next=//evil.example/", 303, "/"),
        ("as=ops&next=https://evil.example/", 303, "/"),
        ("as=member&next=/realtime-demo.html", 303, "/realtime-demo.html"),
        ("as=root", 400, None),
    ],
)
def test_the_sign_in_redirects_only_to_this_server(dev_server: DevServer, query: str, status: int, location) -> None:
    response = httpx.get(f"{dev_server.url}/__dev/sign-in?{query}")
    assert response.status_code == status
    assert response.headers.get("location") == location


def test_no_dev_sign_in_when_sessions_are_verified_with_a_real_key(tmp_path) -> None:
    _, public_pem = ensure_dev_key_pair(tmp_path / "someone-elses-clerk")
    with running_dev_server(tmp_path / "data", CLERK_JWT_KEY=public_pem) as server:
        server.wait_for(r"sign in: +through your Clerk instance", 1)
        refused = httpx.get(f"{server.url}/__dev/sign-in?as=super_admin")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "dev_sign_in_unavailable"
