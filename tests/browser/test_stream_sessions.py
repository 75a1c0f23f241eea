"""A stream ends with its session's token, in a real browser (Chromium, ``ermis-realtime.js``
against ``scripts/dev``): the server ends it with ``stream.end`` ``{"reason": "token_expired"}``,
the page reconnects at once with the session its auth refreshed in the cookie (here the test
plays Clerk's part and sets it), the badge never leaves 'streaming' and an alert written across
the reconnect arrives once. A cookie refreshed a moment late (a 401 on the reconnect) is waited
for, not taken as a sign-out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.support.browser import record_badge_changes
from tests.support.devserver import DevServer, dev_token, running_dev_server

TTL_S = 3  # the first token's life; it verifies for 5 s more (the leeway)
CLAIMS = ("--sub", "user_expiring", "--org-id", "org_expiring", "--org-role", "org:owner")


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with running_dev_server(tmp_path_factory.mktemp("session-dev"), ERMIS_SSE_POLL_INTERVAL_MS="300") as server:
        yield server


def sign_in(context: BrowserContext, server: DevServer, ttl_s: int) -> None:
    """What the page's auth does: a fresh session token in the ``__session`` cookie."""
    token = dev_token(server, *CLAIMS, "--ttl", str(ttl_s))
    context.add_cookies([{"name": "__session", "value": token, "url": server.url}])


def open_expiring_demo(browser: Browser, server: DevServer) -> tuple[BrowserContext, Page, list[tuple[str, int]]]:
    context = browser.new_context()
    sign_in(context, server, TTL_S)
    page = context.new_page()
    answers: list[tuple[str, int]] = []
    page.on(
        "response",
        lambda response: answers.append((response.url.split("?")[0].removeprefix(server.url), response.status)),
    )
    page.goto(f"{server.url}/realtime-demo.html?pollMs=1000")
    expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
    record_badge_changes(page)
    return context, page, answers


def write_alert(server: DevServer, alert_id: str) -> None:
    server.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
        " VALUES (%s, 'org_expiring', 'r', %s, 'Across the session end', 'warning', 'in-app')",
        (alert_id, alert_id),
    )


def test_a_stream_ends_with_its_token_and_the_page_reconnects_with_the_fresh_one(
    browser: Browser, dev_server: DevServer
) -> None:
    context, page, answers = open_expiring_demo(browser, dev_server)
    write_alert(dev_server, "session-warm-up")  # past the stream's opening read (see the self-close test)
    expect(page.locator('li[data-event-id="session-warm-up"]')).to_have_count(1, timeout=10_000)
    sign_in(context, dev_server, 600)  # the auth refreshes the cookie before the token expires
    alert_ids = []
    for number in range(14):  # 0.5 s apart: across the end at TTL_S + leeway (about 8 s after the open)
        alert_ids.append(f"session-{number}")
        write_alert(dev_server, alert_ids[-1])
        page.wait_for_timeout(500)
    for alert_id in alert_ids:
        expect(page.locator(f'li[data-event-id="{alert_id}"]')).to_have_count(1, timeout=10_000)
        expect(page.locator(f'li[data-event-id="{alert_id}"]')).not_to_contain_text("(replay)")
    assert page.evaluate("window.statuses") == []  # not once 'polling', not even 'connecting'
    streams = [status for path, status in answers if path == "/api/notifications/events"]
    assert streams[:2] == [200, 200]  # the first stream ended; the next opened with the fresh cookie
    assert "/api/notifications" not in [path for path, _ in answers]  # no poll fired
    context.close()


def test_a_cookie_refreshed_late_is_waited_for(browser: Browser, dev_server: DevServer) -> None:
    """The token expires and the cookie still holds it: the reconnect is refused (401), and
    tried again until the page's auth has set the fresh one — then the stream resumes from its
    last id, with nothing lost."""
    context, page, answers = open_expiring_demo(browser, dev_server)
    write_alert(dev_server, "late-warm-up")
    expect(page.locator('li[data-event-id="late-warm-up"]')).to_have_count(1, timeout=10_000)
    refused = lambda: ("/api/notifications/events", 401) in answers  # noqa: E731
    deadline_ms = (TTL_S + 5 + 10) * 1000
    while not refused() and deadline_ms > 0:
        page.wait_for_timeout(200)
        deadline_ms -= 200
    assert refused(), answers
    write_alert(dev_server, "late-during-the-refusal")
    sign_in(context, dev_server, 600)
    expect(page.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
    expect(page.locator('li[data-event-id="late-during-the-refusal"]')).to_have_count(1, timeout=10_000)
    context.close()


def test_two_users_of_one_browser_never_share_a_stream(browser: Browser, dev_server: DevServer) -> None:
    """User A's two tabs share one stream (one tab leads, the other is relayed to). A signs out
    and B signs in, in one tab — the cookie is the browser's, so both tabs now are B's: a
    notification of A's written then reaches neither tab, and B's reaches both, over B's stream."""
    context = browser.new_context()

    def sign_in_as(user: str) -> None:
        token = dev_token(dev_server, "--sub", user, "--org-id", "org_two", "--org-role", "org:member")
        context.add_cookies([{"name": "__session", "value": token, "url": dev_server.url}])

    def notify(user: str, notification_id: str) -> None:
        dev_server.execute(
            "INSERT INTO notifications (id, user_id, type, title) VALUES (%s, %s, 'system', %s)",
            (notification_id, user, f"for {user}"),
        )

    sign_in_as("user_a")
    tabs = [context.new_page() for _ in range(2)]
    streams: list[str] = []
    for tab in tabs:
        tab.on("request", lambda request: "/api/notifications/events" in request.url and streams.append(request.url))
        tab.goto(f"{dev_server.url}/realtime-demo.html?pollMs=1000")
        expect(tab.get_by_test_id("notifications-status")).to_have_text("streaming", timeout=15_000)
    notify("user_a", "n-a-shared")
    for tab in tabs:
        expect(tab.locator('li[data-event-id="n-a-shared"]')).to_have_count(1, timeout=10_000)
    assert len(streams) == 1  # one stream for both tabs of A

    sign_in_as("user_b")
    notify("user_a", "n-a-after")  # while A's stream is still open: the leader must not relay it
    waited_ms = 0
    while len(streams) < 2 and waited_ms < 10_000:  # B's stream, opened by whichever tab leads now
        tabs[0].wait_for_timeout(100)
        waited_ms += 100
    tabs[0].wait_for_timeout(1000)  # past its opening read: what is written now is news
    notify("user_b", "n-b-after")
    for tab in tabs:
        expect(tab.locator('li[data-event-id="n-b-after"]')).to_have_count(1, timeout=15_000)
    for tab in tabs:
        expect(tab.locator('li[data-event-id="n-a-after"]')).to_have_count(0)
    assert len(streams) == 2  # A's stream dropped, one stream for B's two tabs
    context.close()
