"""One tenant rule (``lib.auth.tenants``): the session's ``org_id`` is made canonical once, and
every route reads with that value — or the session is refused.

A tenant's draft, alert and flag override are seeded with the tenant id stored as the pipeline
writes it. A session naming that tenant in another case or with stray spaces sees the same
data on every route (REST and stream); one whose ``org_id`` has NUL, a control character, a
lone surrogate or non-ASCII letters, or is 10 KB long, is a 401 JSON error on every route —
never a 500, never another tenant's data."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.support.security import record
from tests.support.sse import capture_sse

pytestmark = pytest.mark.security

STORED_TENANT = "Org_Demo_News"
SAME_TENANT = ["org_demo_news", "ORG_DEMO_NEWS", " Org_Demo_News ", "oRG_dEMO_nEWS"]
NOT_A_TENANT = {
    "NUL": "org_demo\x00news",
    "a control character": "org_demo\nnews",
    "a lone surrogate": "org_demo_\ud800",
    "a non-ASCII letter": "org_démo_news",
    "10 KB": "o" * 10_240,
    "a path": "../org_demo_news",
}
REST = ["/api/feed", "/api/notifications", "/api/feature-flags", "/api/stories/story-demo"]
STREAMS = ["/api/feed/events", "/api/notifications/events", "/api/stories/story-demo/events"]


@pytest.fixture
async def seeded(db) -> None:
    await db.execute(
        "INSERT INTO editorial_story_drafts (id, tenant_scope_id, story_id, headline, status, phase)"
        " VALUES ('draft-demo', %s, 'story-demo', 'Seen by its tenant', 'review', 'synthesized')",
        (STORED_TENANT,),
    )
    await db.execute(
        "INSERT INTO alert_history (id, tenant_scope_id, rule_id, story_id, title, severity, channel)"
        " VALUES ('alert-demo', %s, 'r', 'story-demo', 'An alert of the tenant', 'warning', 'in-app')",
        (STORED_TENANT,),
    )
    await db.execute(
        "INSERT INTO feature_flag_values (flag_key, tenant_scope_id, enabled) VALUES ('rssQueuePipeline', %s, true)",
        (STORED_TENANT,),
    )


def what_a_session_sees(url: str, token: str) -> dict[str, object]:
    """Every REST route's status and body, and each stream's status and the ids of its first frames."""
    headers = {"authorization": f"Bearer {token}"}
    seen: dict[str, object] = {}
    with httpx.Client(base_url=url, timeout=10) as client:
        for path in REST:
            response = client.get(path, headers=headers)
            assert response.status_code < 500, (path, response.text)
            seen[path] = (response.status_code, response.json())
    for path in STREAMS:
        capture = asyncio.run(capture_sse(f"{url}{path}", headers, seconds=3, stop_after=2))
        assert capture.status < 500, path
        payloads = [json.loads(frame["data"]) for frame in capture.frames if frame.get("data", "{}") != "{}"]
        ids = sorted(json.dumps(payload.get("id") or payload.get("storyId")) for payload in payloads)
        seen[path] = (capture.status, ids)
    return seen


def test_every_spelling_of_a_tenant_sees_that_tenant_on_every_route(seeded, served_url: str, mint_token) -> None:
    views = {
        org_id: what_a_session_sees(served_url, mint_token(sub="user_demo", org_id=org_id, org_role="org:owner"))
        for org_id in SAME_TENANT
    }
    first = views[SAME_TENANT[0]]
    assert first["/api/stories/story-demo"][0] == 200
    assert "alert-demo" in json.dumps(first["/api/notifications"][1])
    assert "draft-demo" in json.dumps(first["/api/feed"][1])
    assert first["/api/feature-flags"][1]["flags"]["rssQueuePipeline"] is True
    assert '"alert-demo"' in first["/api/notifications/events"][1]
    assert first["/api/feed/events"][0] == 200 and first["/api/stories/story-demo/events"][0] == 200
    differing = [org_id for org_id, view in views.items() if view != first]
    record("tenants", "one tenant in four spellings, every route", tried=len(views) * (len(REST) + len(STREAMS)),
           bad=len(differing))  # fmt: skip
    assert differing == []


@pytest.mark.parametrize("problem", NOT_A_TENANT)
def test_an_org_id_outside_the_grammar_is_a_401_on_every_route(
    seeded, served_url: str, mint_token, problem: str
) -> None:
    token = mint_token(sub="user_demo", org_id=NOT_A_TENANT[problem], org_role="org:owner")
    answers = {}
    with httpx.Client(base_url=served_url, timeout=10) as client:
        for path in REST + STREAMS:
            response = client.get(path, headers={"authorization": f"Bearer {token}"})
            answers[path] = (response.status_code, response.json()["error"]["code"])
    wrong = {path: answer for path, answer in answers.items() if answer != (401, "unauthorized")}
    record("tenants", f"org_id with {problem}, every route", tried=len(answers), bad=len(wrong))
    assert wrong == {}


@pytest.mark.parametrize("sub", ["user\x00demo", "user_\ud800", "u" * 201, "user\x7fdemo"])
def test_a_subject_that_is_not_plain_text_is_a_401(served_url: str, mint_token, sub: str) -> None:
    token = mint_token(sub=sub)
    with httpx.Client(base_url=served_url, timeout=10) as client:
        statuses = {path: client.get(path, headers={"authorization": f"Bearer {token}"}).status_code
                    for path in REST + STREAMS}  # fmt: skip
    record("sessions", "sub with NUL, a surrogate, DEL or 201 characters", tried=len(statuses),
           bad=sum(status != 401 for status in statuses.values()))  # fmt: skip
    assert set(statuses.values()) == {401}
