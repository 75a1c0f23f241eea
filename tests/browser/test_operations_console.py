"""public/admin/ in a real browser against scripts/dev: a super_admin signed in through the dev
sign-in sees a real dead letter (the rss.ingest consumer failing five times on the embedded
queue), redrives it, watches it leave the list and the audit log name them, and the consumer run
again; an ops user cannot change flags; a member gets the restricted text; a hostile page on
another origin cannot act with the operator's cookie. Screenshots go to test-output/."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import psycopg
import pytest
from playwright.sync_api import Browser, Page, expect
from vercel.queue import ALL_DEPLOYMENTS, QueueClient

from lib.queues.handlers import LAST_INGEST_RUN_KEY
from lib.queues.signing import SIGNATURE_FIELD, SIGNED_AT_FIELD, signature_for
from tests.support.browser import OUTPUT
from tests.support.devserver import DevServer, running_dev_server
from tests.support.queue import rss_message
from tests.support.security import record
from tests.support.servers import serve_in_thread

SIGNING_SECRET = "console-browser-test-secret"
DEAD_LETTER_WAIT_MS = 90_000  # five deliveries, 2 + 4 + 8 + 16 s of backoff between them


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    data_dir = tmp_path_factory.mktemp("console-dev")
    with running_dev_server(data_dir, ERMIS_QUEUE_SIGNING_SECRET=SIGNING_SECRET) as server:
        yield server


def execute(server: DevServer, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def signed_in(browser: Browser, server: DevServer, persona: str) -> Page:
    """A fresh browser that signed in through the dev server's sign-in URL, on the console."""
    page = browser.new_context().new_page()
    page.goto(f"{server.url}/__dev/sign-in?as={persona}&next={quote('/admin/?refreshMs=1000', safe='')}")
    expect(page).to_have_url(f"{server.url}/admin/?refreshMs=1000")
    return page


def send_ingest_message(server: DevServer, batch_id: str) -> None:
    queue_url = server.wait_for(r"queue: embedded Vercel Queue service at (\S+),", 5).group(1)
    unsigned = {**rss_message(batch_id), SIGNED_AT_FIELD: int(time.time() * 1000)}
    message = {**unsigned, SIGNATURE_FIELD: signature_for(unsigned, SIGNING_SECRET)}

    async def send() -> None:
        client = QueueClient(region="iad1", token="local-token", base_url=queue_url, deployment=ALL_DEPLOYMENTS)
        await client.send("rss-ingest", message)

    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API owns this thread's event loop
        thread.submit(asyncio.run, send()).result()


def test_a_super_admin_redrives_a_real_dead_letter(browser: Browser, dev_server: DevServer) -> None:
    execute(
        dev_server,
        "INSERT INTO feature_flag_values (flag_key, tenant_scope_id, enabled) VALUES ('rssQueuePipeline', '', true)",
    )
    # A job that stopped running three days ago, to be flagged stale.
    execute(
        dev_server,
        "INSERT INTO cron_runs (job, trigger, status, started_at, finished_at, duration_ms, http_status, summary)"
        " VALUES ('erasure-purge', 'schedule', 'succeeded', now() - interval '3 days', now() - interval '3 days',"
        " 40, 200, '{\"due\": 0}')",
    )
    # The ingest consumer cannot write its state while the table is away: every delivery fails.
    execute(dev_server, "ALTER TABLE platform_state RENAME TO platform_state_away")
    try:
        send_ingest_message(dev_server, "batch-console")
        page = signed_in(browser, dev_server, "super_admin")
        row = page.locator('[data-testid="dead-letters"] tr[data-entry^="queue:"]')
        expect(row).to_have_count(1, timeout=DEAD_LETTER_WAIT_MS)
    finally:
        execute(dev_server, "ALTER TABLE platform_state_away RENAME TO platform_state")
    expect(row).to_contain_text("platform_state")
    ingest = page.locator('[data-topic="rss.ingest"]')
    # The counters come from the refresh's queue-health request, made before its dead-letter
    # one: they can be a refresh behind the row.
    expect(ingest.locator('[data-counter="retries"]')).to_have_text("4", timeout=15_000)
    expect(ingest.locator('[data-counter="deadLetters"]')).to_have_text("1", timeout=15_000)
    expect(page.locator('tr[data-job="erasure-purge"]')).to_have_attribute("data-stale", "true")
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "admin-console-dead-letter.png"), full_page=True)

    row.locator('input[type="checkbox"]').check()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("redrive-selected").click()
    expect(page.get_by_test_id("action-result")).to_contain_text("redriven")
    expect(page.locator('[data-testid="dead-letters"] tr[data-entry^="queue:"]')).to_have_count(0)
    audit = page.locator('[data-testid="audit"] tr').first
    expect(audit).to_contain_text("user_dev_super_admin")
    expect(audit).to_contain_text("redrive")
    # The consumer runs again, on the redriven message, and succeeds this time.
    expect(ingest.locator('[data-counter="successes"]')).to_have_text("1", timeout=60_000)
    last_run = "SELECT value->>'batchId' FROM platform_state WHERE key = %s"
    [(batch,)] = execute(dev_server, last_run, (LAST_INGEST_RUN_KEY,))
    assert batch == "batch-console"
    page.screenshot(path=str(OUTPUT / "admin-console.png"), full_page=True)


def test_an_ops_user_sees_the_console_but_cannot_change_flags(browser: Browser, dev_server: DevServer) -> None:
    page = signed_in(browser, dev_server, "ops")
    expect(page.get_by_test_id("flags-restricted")).to_be_visible(timeout=15_000)
    expect(page.locator('[data-testid="flags"] input[type="checkbox"]')).to_have_count(0)
    expect(page.locator('[data-testid="crons"] tr')).to_have_count(5)
    status = page.evaluate(
        """() => fetch('/api/admin/flags', {method: 'PUT', headers: {'content-type': 'application/json'},
             body: JSON.stringify({key: 'rssQueuePipeline', enabled: false})}).then((r) => r.status)"""
    )
    assert status == 403


def test_the_change_path_shows_rows_waiting_for_a_position_and_then_the_detector(
    browser: Browser, dev_server: DevServer
) -> None:
    """Rows committed while no stream is open wait without a position (stalled: no detector);
    once a stream opens, its process leads, positions them, and the console says who and since
    when."""
    page = signed_in(browser, dev_server, "ops")
    change_path = page.get_by_test_id("change-path")
    expect(change_path).to_contain_text("redis", timeout=15_000)
    execute(
        dev_server,
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, severity, channel)"
        " VALUES ('path-1', 'org_path', 'r', 'path-1', 'info', 'in-app')",
    )
    if page.locator('[data-field="process"]').inner_text() == "none":  # no stream open anywhere yet
        expect(page.locator('[data-stalled="true"]')).to_be_visible(timeout=5_000)
        expect(page.locator('[data-field="without a position"]')).not_to_have_text("0")
    stream = browser.new_context().new_page()
    stream.goto(f"{dev_server.url}/__dev/sign-in?as=owner&next={quote('/realtime-demo.html', safe='')}")
    expect(page.locator('[data-field="process"]')).not_to_have_text("none", timeout=15_000)
    expect(page.locator('[data-field="without a position"]')).to_have_text("0", timeout=10_000)
    expect(page.locator('[data-stalled="false"]')).to_be_visible()
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "admin-console-change-path.png"), full_page=True)
    stream.close()


def test_a_super_admin_toggles_a_flag_and_the_audit_log_says_so(browser: Browser, dev_server: DevServer) -> None:
    page = signed_in(browser, dev_server, "super_admin")
    toggle = page.get_by_label("aiUsageMetering enabled")
    expect(toggle).to_be_visible(timeout=15_000)
    was = toggle.is_checked()
    toggle.click()
    expect(page.get_by_label("aiUsageMetering enabled")).to_be_checked(checked=not was)
    expect(page.locator('[data-testid="audit"] tr').first).to_contain_text("flag.set")
    flag = "SELECT enabled FROM feature_flag_values WHERE flag_key = 'aiUsageMetering' AND tenant_scope_id = ''"
    [(enabled,)] = execute(dev_server, flag)
    assert enabled is (not was)


def test_a_member_sees_the_restricted_text(browser: Browser, dev_server: DevServer) -> None:
    page = signed_in(browser, dev_server, "member")
    restricted = page.get_by_test_id("restricted")
    expect(restricted).to_contain_text("Queue monitoring access is restricted", timeout=15_000)
    expect(restricted).to_contain_text(
        "This operations surface is limited to platform users with queue monitoring access."
    )
    expect(page.get_by_test_id("console")).to_be_hidden()
    page.screenshot(path=str(OUTPUT / "admin-console-restricted.png"), full_page=True)


def test_a_hostile_page_cannot_act_with_the_operators_cookie(browser: Browser, dev_server: DevServer) -> None:
    [(entry_id,)] = execute(
        dev_server,
        "INSERT INTO ai_usage_metering_outbox (event, status, attempt_count) VALUES ('{}', 'failed', 5) RETURNING id",
    )
    body = json.dumps({"action": "delete", "source": "metering", "ids": [str(entry_id)], "reason": "csrf"})
    target = f"{dev_server.url}/api/admin/dead-letters"
    hostile = f"""<!doctype html><form method="post" action="{target}" enctype="text/plain">
      <input name='{body[:-2]}' value='"}}'></form>
      <script>
        fetch({json.dumps(target)}, {{method: 'POST', mode: 'no-cors', credentials: 'include',
          headers: {{'content-type': 'text/plain'}}, body: {json.dumps(body)}}});
        fetch({json.dumps(target)}, {{method: 'POST', credentials: 'include',
          headers: {{'content-type': 'application/json'}}, body: {json.dumps(body)}}}).catch(() => {{}});
        setTimeout(() => document.forms[0].submit(), 300);
      </script>"""

    async def evil(_scope, _receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": hostile.encode()})

    page = signed_in(browser, dev_server, "super_admin")  # the operator's browser, cookie set
    responses: list[int] = []
    page.on(
        "response",
        lambda response: (
            responses.append(response.status) if response.url == target and response.request.method == "POST" else None
        ),
    )
    with serve_in_thread(evil) as evil_url:  # another origin (another port), same site
        page.goto(evil_url)
        page.wait_for_timeout(1500)
    assert responses and set(responses) <= {403, 415}
    [(status,)] = execute(dev_server, "SELECT status FROM ai_usage_metering_outbox WHERE id = %s", (entry_id,))
    assert status == "failed"  # not discarded


def serve_page(html: str):
    """A page of another origin (another port on loopback: the same site, so the Lax cookie goes)."""

    async def page(_scope, _receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": html.encode()})

    return serve_in_thread(page)


def test_another_origin_cannot_frame_the_console(browser: Browser, dev_server: DevServer) -> None:
    """A page of another origin frames /admin/ for a click-jacking: with the operator's cookie
    the console would render there, flag checkboxes and all; it does not render."""
    page = signed_in(browser, dev_server, "super_admin")
    expect(page.get_by_test_id("console")).to_be_visible(timeout=15_000)
    with serve_page(f'<!doctype html><iframe src="{dev_server.url}/admin/" width="900" height="700"></iframe>') as url:
        page.goto(url)
        page.wait_for_timeout(2000)
        [framed] = page.main_frame.child_frames
        assert framed.locator('[data-testid="flags"]').count() == 0
        assert not framed.url.startswith(dev_server.url)  # the browser refused to load it there


def test_a_script_injected_into_the_console_does_not_run(browser: Browser, dev_server: DevServer) -> None:
    """A stored value with markup (an audit reason) is shown as text; and markup that reached the
    page anyway (a bug of tomorrow, here put in by hand) runs nothing: the policy allows no inline
    script, handler or style."""
    attack = '<img src="/nothing-here" onerror="window.pwned = 1">'
    execute(
        dev_server,
        "INSERT INTO ops_audit_log (actor, action, source, target_ids, reason, outcome)"
        " VALUES ('user_x', 'delete', 'queue', '[]', %s, '{}')",
        (attack,),
    )
    page = signed_in(browser, dev_server, "super_admin")
    expect(page.get_by_test_id("audit")).to_contain_text(attack, timeout=15_000)
    page.evaluate(
        """(attack) => {
          window.violations = [];
          document.addEventListener('securitypolicyviolation', (e) => window.violations.push(e.effectiveDirective));
          document.body.insertAdjacentHTML('beforeend', attack + '<p id="styled" style="color: rgb(255, 0, 0)">x</p>');
        }""",
        attack,
    )
    page.wait_for_timeout(1000)
    assert page.evaluate("window.pwned") is None
    assert page.evaluate("getComputedStyle(document.getElementById('styled')).color") != "rgb(255, 0, 0)"
    assert {"script-src-attr", "style-src-attr"} <= set(page.evaluate("window.violations"))


# Wraps fetch before the console loads: the admin APIs answer 2.5 s late, and the page counts
# how many reads of /api/admin/queues (one per refresh) start and overlap.
SLOW_ADMIN_API = """
window.refreshes = { started: [], inFlight: 0, mostAtOnce: 0 };
const realFetch = window.fetch.bind(window);
window.fetch = async (input, init) => {
  const url = String(input instanceof Request ? input.url : input);
  if (!url.includes('/api/admin/queues')) return realFetch(input, init);
  const seen = window.refreshes;
  seen.started.push(performance.now());
  seen.inFlight += 1;
  seen.mostAtOnce = Math.max(seen.mostAtOnce, seen.inFlight);
  try {
    await new Promise((resolve) => setTimeout(resolve, 2500));
    return await realFetch(input, init);
  } finally {
    seen.inFlight -= 1;
  }
};
"""


ASKED_REFRESHES = {"1": 1, "Infinity": 1, "1e300": 1, "-5": 1, "NaN": 1, "0x10": 1, "2147483648": 1, "1000": 2}


@pytest.mark.security
def test_the_refresh_is_bounded_whatever_the_link_asks(browser: Browser, dev_server: DevServer) -> None:
    """A link can carry any ``refreshMs``: anything but a whole number of milliseconds from 1 s
    to 1 h is the default (10 s), so in a page's first 6 s one refresh runs (two at 1 s: each
    takes 2.5 s here, and the next is timed from its end); and a "refresh now" button hammered
    meanwhile never has two refreshes running at once."""
    context = browser.new_context()
    context.add_init_script(SLOW_ADMIN_API)
    page = context.new_page()
    page.goto(f"{dev_server.url}/__dev/sign-in?as=super_admin&next={quote('/admin/', safe='')}")
    pages = {}
    for asked in ASKED_REFRESHES:
        pages[asked] = context.new_page()
        pages[asked].goto(f"{dev_server.url}/admin/?refreshMs={quote(asked)}")
    last = pages["1000"]
    last.wait_for_timeout(max(0, 6000 - last.evaluate("performance.now()")))  # the CSP refuses wait_for_function
    counted = {
        asked: len([t for t in shown.evaluate("window.refreshes.started") if t < 6000])
        for asked, shown in pages.items()
    }
    for _ in range(8):
        last.get_by_test_id("refresh-now").click()
        last.wait_for_timeout(150)
    last.wait_for_timeout(6000)
    seen = last.evaluate("window.refreshes")
    gaps = [later - earlier for earlier, later in zip(seen["started"], seen["started"][1:], strict=False)]
    for asked, reads in ASKED_REFRESHES.items():
        record("console links", "refreshMs from a link: refreshes in a page's first 6 s", tried=1,
               bad=int(counted[asked] != reads))  # fmt: skip
    record(
        "console links",
        "refresh hammered while the API answers late: two at once",
        tried=1,
        bad=int(seen["mostAtOnce"] != 1),
    )
    assert counted == ASKED_REFRESHES
    assert seen["mostAtOnce"] == 1 and all(gap >= 2400 for gap in gaps), seen
    context.close()
