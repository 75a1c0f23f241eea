"""public/ermis-realtime.js in a real browser (Debian's Chromium driven by Playwright) against
scripts/dev: rows written to Postgres appear on the page, the REST-polling flag settles into
polling, a dev server stopped mid-stream moves the badge to polling and back, the feed keeps
updating with EventSource broken, and a missing story stops for good."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import OUTPUT, record_badge_changes
from tests.support.devserver import DevServer, dev_token, running_dev_server

STREAM_ENV = {"ERMIS_SSE_POLL_INTERVAL_MS": "300"}


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with running_dev_server(tmp_path_factory.mktemp("browser-dev"), **STREAM_ENV) as server:
        yield server


def open_demo(browser: Browser, server: DevServer, query: str = "", **claims: str) -> Page:
    args = [item for key, value in claims.items() for item in (f"--{key.replace('_', '-')}", value)]
    context = browser.new_context()
    context.add_cookies([{"name": "__session", "value": dev_token(server, *args), "url": server.url}])
    page = context.new_page()
    page.goto(f"{server.url}/realtime-demo.html?pollMs=1000{query}")
    return page


def test_rows_written_to_postgres_appear_on_the_page(browser: Browser, dev_server: DevServer) -> None:
    page = open_demo(browser, dev_server, sub="user_owner", org_id="org_live", org_role="org:owner")
    expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
    expect(page.get_by_test_id("feed-status")).to_have_text("streaming")
    dev_server.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
        " VALUES ('alert-live-1', 'org_live', 'r', 's', 'Earthquake in Chile', 'critical', 'in-app')",
    )
    dev_server.execute(
        "INSERT INTO editorial_story_drafts (id, tenant_scope_id, story_id, headline, status, phase)"
        " VALUES ('org_live:s-1', 'org_live', 's-1', 'Quake', 'review', 'synthesized')",
    )
    expect(page.locator('li[data-event-id="alert-live-1"]')).to_contain_text("Earthquake in Chile", timeout=10_000)
    expect(page.get_by_test_id("feed-count")).to_have_text("1", timeout=10_000)
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "realtime-demo.png"), full_page=True)


def test_the_rest_polling_flag_settles_into_polling(browser: Browser, dev_server: DevServer) -> None:
    dev_server.execute(
        "INSERT INTO feature_flag_values (flag_key, tenant_scope_id, enabled)"
        " VALUES ('notificationsRestPolling', 'org_poll', true)",
    )
    page = open_demo(browser, dev_server, sub="user_poll", org_id="org_poll", org_role="org:member")
    expect(page.get_by_test_id("notifications-status")).to_have_text("polling", timeout=15_000)
    expect(page.get_by_test_id("notifications-refreshes")).not_to_have_text("0", timeout=5_000)
    page.wait_for_timeout(1500)
    expect(page.get_by_test_id("notifications-status")).to_have_text("polling")  # settled: no stream retries


def test_the_feed_keeps_updating_with_eventsource_broken(browser: Browser, dev_server: DevServer) -> None:
    page = open_demo(
        browser, dev_server, "&feedStream=broken", sub="user_feed", org_id="org_feed", org_role="org:member"
    )
    expect(page.get_by_test_id("feed-status")).to_have_text("polling", timeout=15_000)
    expect(page.get_by_test_id("feed-count")).to_have_text("0", timeout=10_000)
    dev_server.execute(
        "INSERT INTO editorial_story_drafts (id, tenant_scope_id, story_id, headline, status, phase)"
        " VALUES ('org_feed:s-9', 'org_feed', 's-9', 'Polled', 'review', 'synthesized')",
    )
    expect(page.get_by_test_id("feed-count")).to_have_text("1", timeout=10_000)


def test_a_story_stream_follows_changes_and_stops_on_404(browser: Browser, dev_server: DevServer) -> None:
    dev_server.execute(
        "INSERT INTO editorial_story_drafts (id, tenant_scope_id, story_id, headline, status, phase)"
        " VALUES ('org_story:s-7', 'org_story', 's-7', 'Story', 'review', 'synthesized')",
    )
    page = open_demo(browser, dev_server, "&story=s-7", sub="user_story", org_id="org_story", org_role="org:member")
    expect(page.get_by_test_id("story-status")).to_have_text("streaming", timeout=15_000)
    expect(page.get_by_test_id("story-phase")).to_have_text("synthesized / review")
    dev_server.execute("UPDATE editorial_story_drafts SET status = 'published' WHERE id = 'org_story:s-7'")
    expect(page.get_by_test_id("story-phase")).to_have_text("synthesized / published", timeout=10_000)

    missing = open_demo(browser, dev_server, "&story=nope", sub="user_story", org_id="org_story", org_role="org:member")
    expect(missing.get_by_test_id("story-status")).to_have_text("offline", timeout=15_000)
    missing.wait_for_timeout(2500)
    expect(missing.get_by_test_id("story-status")).to_have_text("offline")


def test_a_server_stopped_mid_stream_moves_the_badge_to_polling_and_back(browser: Browser, tmp_path: Path) -> None:
    data_dir = tmp_path / "restart-dev"
    with running_dev_server(data_dir, **STREAM_ENV) as first:
        port = int(first.url.rsplit(":", 1)[1])
        page = open_demo(browser, first, sub="user_restart", org_id="org_restart", org_role="org:owner")
        expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
    expect(page.get_by_test_id("notifications-status")).to_have_text("polling", timeout=15_000)
    with running_dev_server(data_dir, port=port, **STREAM_ENV):
        expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=30_000)


def test_a_session_without_a_tenant_stops_polling_the_feed(browser: Browser, dev_server: DevServer) -> None:
    """The stream answers 204 and /api/feed has no watermark: nothing to watch, so no poll loop."""
    page = open_demo(browser, dev_server, sub="user_ops", platform_role="ops")
    feed_polls: list[str] = []
    page.on("request", lambda request: feed_polls.append(request.url) if request.url.endswith("/api/feed") else None)
    expect(page.get_by_test_id("feed-status")).to_have_text("offline", timeout=15_000)
    polls_when_settled = len(feed_polls)
    page.wait_for_timeout(3000)  # three poll intervals of the demo page
    assert len(feed_polls) == polls_when_settled <= 1


def test_the_change_path_shows_a_test_alert_from_insert_to_frame(browser: Browser, dev_server: DevServer) -> None:
    """The dev server's button writes an alert; the change path shows it arrive: its kind, its
    position, the process that sent the frame, and the time from the insert to the frame."""
    page = open_demo(browser, dev_server, sub="user_path", org_id="org_path", org_role="org:owner")
    expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
    page.get_by_test_id("watch-wire").click()
    button = page.get_by_test_id("write-test-alert")
    expect(button).to_be_visible()
    page.wait_for_timeout(1500)  # the change path's own connection is open: what follows is news
    button.click()
    row = page.get_by_test_id("change-path-events").locator("tr").first
    expect(row).to_contain_text("alert.triggered", timeout=10_000)
    kind, position, process, latency = row.locator("td").all_inner_texts()
    assert kind == "alert.triggered" and int(position) > 0
    assert re.fullmatch(r"[0-9a-f]{8}", process)
    assert 0 <= int(latency.removesuffix(" ms")) < 5000
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / "realtime-demo-change-path.png"), full_page=True)


def test_a_visitor_without_a_session_is_told_how_to_sign_in(browser: Browser, dev_server: DevServer) -> None:
    page = browser.new_context().new_page()
    page.goto(f"{dev_server.url}/realtime-demo.html?pollMs=1000")
    notice = page.get_by_test_id("signed-out")
    expect(notice).to_be_visible(timeout=10_000)
    expect(notice).to_contain_text("__session")
    notice.get_by_role("link").click()  # the dev server's sign-in, back to the demo
    expect(page).to_have_url(f"{dev_server.url}/realtime-demo.html")
    expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
    expect(notice).to_be_hidden()


def open_streams(server: DevServer) -> dict[str, int]:
    return httpx.get(f"{server.url}/__dev/streams").json()


def settled_open_streams(server: DevServer) -> dict[str, int]:
    """The open streams once a second has passed without change: a context closed by an earlier
    test is only counted out when the server notices its disconnect."""
    last, deadline = open_streams(server), time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(1)
        now = open_streams(server)
        if now == last:
            return now
        last = now
    return last


ELECTIONS = {
    "web-locks": "",
    # Browsers without the Web Locks API elect over BroadcastChannel (broadcastElection).
    "broadcast": "delete Navigator.prototype.locks;",
}


@pytest.mark.parametrize("election", ELECTIONS)
def test_three_tabs_share_one_connection_per_stream_and_lose_nothing_on_hand_over(
    browser: Browser, dev_server: DevServer, election: str
) -> None:
    before = settled_open_streams(dev_server)
    context = browser.new_context()
    context.add_init_script(ELECTIONS[election])
    tenant = f"org_tabs_{election}"
    token = dev_token(dev_server, "--sub", f"user_tabs_{election}", "--org-id", tenant, "--org-role", "org:owner")
    context.add_cookies([{"name": "__session", "value": token, "url": dev_server.url}])
    tabs = []
    for _ in range(3):
        tab = context.new_page()
        tab.goto(f"{dev_server.url}/realtime-demo.html?pollMs=1000")
        expect(tab.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
        expect(tab.get_by_test_id("feed-status")).to_have_text("streaming", timeout=15_000)
        tabs.append(tab)
    assert tabs[0].evaluate("'locks' in navigator") == (election == "web-locks")

    def opened(stream: str) -> int:
        return open_streams(dev_server).get(stream, 0) - before.get(stream, 0)

    assert (opened("notifications"), opened("feed")) == (1, 1)  # three tabs, one connection each

    def alert(number: int, title: str) -> str:
        alert_id = f"tabs-{election}-{number}"
        dev_server.execute(
            "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
            " VALUES (%s, %s, 'r', %s, %s, 'warning', 'in-app')",
            (alert_id, tenant, alert_id, title),
        )
        return f'li[data-event-id="{alert_id}"]'

    first = alert(1, "Seen by every tab")
    for tab in tabs:
        expect(tab.locator(first)).to_have_count(1, timeout=10_000)

    tabs[0].close()  # the leader goes; a follower takes over from the last id it relayed
    second = alert(2, "Written during the hand-over")
    for tab in tabs[1:]:
        expect(tab.locator(second)).to_have_count(1, timeout=15_000)
        expect(tab.locator(first)).to_have_count(1)  # not replayed as new
        expect(tab.get_by_test_id("notifications-status")).to_have_text("streaming")
    deadline = time.monotonic() + 15
    while opened("notifications") != 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (opened("notifications"), opened("feed")) == (1, 1)
    context.close()
    while (opened("notifications"), opened("feed")) != (0, 0) and time.monotonic() < deadline + 15:
        time.sleep(0.2)


def test_a_stream_that_self_closes_stays_live_and_loses_nothing(browser: Browser, tmp_path: Path) -> None:
    """Each self-close sends stream.end; the client reconnects at once from its last id: the badge
    never leaves 'streaming', no poll runs, and alerts written across the reconnects arrive once."""
    with running_dev_server(tmp_path / "self-close-dev", ERMIS_SSE_MAX_DURATION_S="1.5", **STREAM_ENV) as server:
        page = open_demo(browser, server, sub="user_end", org_id="org_end", org_role="org:owner")
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url.split("?")[0].removeprefix(server.url)))
        expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
        record_badge_changes(page)

        def write_alert(alert_id: str) -> None:
            server.execute(
                "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
                " VALUES (%s, 'org_end', 'r', %s, 'Across a reconnect', 'warning', 'in-app')",
                (alert_id, alert_id),
            )

        # The badge reads 'streaming' once the response opens, which can be before the stream's
        # opening read; a row written in between is rightly part of that read's replay. So the
        # alerts start once one has arrived, when the stream is past its opening read.
        write_alert("end-warm-up")
        expect(page.locator('li[data-event-id="end-warm-up"]')).to_have_count(1, timeout=10_000)
        alert_ids = []
        for number in range(12):  # 12 alerts 0.4 s apart: across three self-closes or more
            alert_ids.append(f"end-{number}")
            write_alert(alert_ids[-1])
            page.wait_for_timeout(400)
        for alert_id in alert_ids:
            expect(page.locator(f'li[data-event-id="{alert_id}"]')).to_have_count(1, timeout=10_000)
        assert page.evaluate("window.statuses") == []  # not once 'polling', not even 'connecting'
        assert requests.count("/api/notifications/events") >= 3
        assert "/api/notifications" not in requests and "/api/feed" not in requests  # no poll fired
        for alert_id in alert_ids:  # each arrived live, none replayed by a reconnect
            expect(page.locator(f'li[data-event-id="{alert_id}"]')).not_to_contain_text("(replay)")


VALIDATION_PAGE_SCRIPT = (Path(__file__).parent / "invalid_frames.js").read_text(encoding="utf-8")


def test_frames_that_do_not_match_their_schema_are_dropped_and_reported_once(
    browser: Browser, dev_server: DevServer
) -> None:
    page = browser.new_context().new_page()
    page.goto(f"{dev_server.url}/realtime-demo.html")
    seen = page.evaluate(VALIDATION_PAGE_SCRIPT)
    assert seen["events"] == [
        ["alert.triggered", "a1"],
        ["review.status.changed", "r1"],
        ["delivery.failed", "d1"],
        ["notification.created", "n1"],
    ]
    assert [name for name, _ in seen["invalid"]] == [
        "alert.triggered",  # reported once, though two alerts were bad
        "review.status.changed",
        "delivery.failed",
        "notification.created",
        "stream.reset",
        "feed.changed",
        "story.phase",
    ]
    assert seen["refreshes"] == 2  # the events' coalesced refresh and the valid reset's; not the bad reset's
    assert (seen["feed"], seen["phases"]) == ([3], ["p1"])
    assert seen["reconnects"] == [0, 1] and seen["idAfterBadCursor"] == "" and seen["lastEventId"] == "good-id"
    assert [message.split(" frame")[0] for message in seen["warned"]] == [
        "ermis-realtime: dropped a stream.end",
        "ermis-realtime: dropped a stream.cursor",
    ]


CLOSE_AT_EVERY_MOMENT = """async () => {
  const { broadcastElection, sharedEventSourceClass } = await import('/ermis-realtime.js');
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const leadsAfterClose = [];
  // Closed at each moment of an election's life: before its first tick, during its claim,
  // just after leading, while leading; and closed twice.
  for (const after of [0, 50, 210, 260, 1500]) {
    let leads = 0;
    const election = broadcastElection(`close-test-${after}`, () => { leads += 1; }, () => {});
    await sleep(after);
    election.close();
    election.close();
    const atClose = leads;
    leadsAfterClose.push(async () => leads - atClose);
  }
  const Shared = sharedEventSourceClass();
  for (const after of [0, 100, 1500]) {
    const source = new Shared('/api/notifications/events');
    await sleep(after);
    source.close();
    source.close();
  }
  await sleep(4000);  // every timer an election or a source had would have fired by now
  return Promise.all(leadsAfterClose.map((count) => count()));
}"""


@pytest.mark.parametrize("election", ELECTIONS)
def test_close_leaves_no_timer_or_channel_that_can_throw(
    browser: Browser, dev_server: DevServer, election: str
) -> None:
    """``close()`` of an election or a shared stream at any moment of its life: nothing it left
    behind throws (a timer posting on its closed BroadcastChannel was ``InvalidStateError``), and
    a closed election never leads."""
    context = browser.new_context()
    context.add_init_script(ELECTIONS[election])
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{dev_server.url}/realtime-demo.html")
    leads_after_close = page.evaluate(CLOSE_AT_EVERY_MOMENT)
    assert (errors, leads_after_close) == ([], [0] * 5)
    context.close()
