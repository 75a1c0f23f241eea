"""vercel.json against the tree: region, the five crons (CONTRACTS §5), durations, queue
triggers, and every declared path or function resolving to a file in api/."""

from __future__ import annotations

import ast
import json

import pytest

from lib.http.security_headers import EDGE_HEADERS
from lib.local.paths import PROJECT_ROOT
from lib.local.routing import discover_routes, resolve
from lib.streams.feed import FEED_MAX_DURATION_S
from lib.streams.notifications import NOTIFICATIONS_MAX_DURATION_S
from lib.streams.story import STORY_MAX_DURATION_S

CONFIG = json.loads((PROJECT_ROOT / "vercel.json").read_text())
ROUTES = discover_routes(PROJECT_ROOT)
API_FILES = sorted(route.file for route in ROUTES)

CONTRACT_CRONS = {
    "/api/admin/rss/refresh": "*/10 * * * *",
    "/api/admin/ai/metering/flush": "*/5 * * * *",
    "/api/admin/ai/ledger/retry/flush": "*/5 * * * *",
    "/api/admin/state/cleanup": "0 3 * * *",
    "/api/admin/erasure/purge": "30 3 * * *",
}
CONTRACT_TOPICS = {
    "api/queues/rss/ingest.py": "rss-ingest",
    "api/queues/rss/enrich.py": "rss-enrich",
    "api/queues/rss/cluster.py": "rss-cluster",
    "api/queues/rss/synthesize.py": "rss-synthesize",
    "api/queues/webhooks/deliver.py": "webhooks-deliver",
}


def test_single_region() -> None:
    assert CONFIG["regions"] == ["arn1"]


def test_the_five_crons_with_their_schedules() -> None:
    assert {cron["path"]: cron["schedule"] for cron in CONFIG["crons"]} == CONTRACT_CRONS


@pytest.mark.parametrize("path", sorted(CONTRACT_CRONS))
def test_every_cron_path_resolves_to_a_function(path: str) -> None:
    found = resolve(ROUTES, path)
    assert found is not None, path
    assert (PROJECT_ROOT / found[0].file).is_file()


def test_every_function_key_is_a_file() -> None:
    for key in CONFIG["functions"]:
        assert (PROJECT_ROOT / key).is_file(), key
        assert key in API_FILES, key


STREAM_SELF_CLOSE_S = {
    "api/feed/events.py": FEED_MAX_DURATION_S,
    "api/notifications/events.py": NOTIFICATIONS_MAX_DURATION_S,
    "api/stories/[storyId]/events.py": STORY_MAX_DURATION_S,
}


def test_the_refresh_tick_gets_300_seconds() -> None:
    assert CONFIG["functions"]["api/admin/rss/refresh.py"]["maxDuration"] == 300


@pytest.mark.parametrize("file", sorted(STREAM_SELF_CLOSE_S))
def test_every_stream_outlives_its_self_close_by_10_seconds(file: str) -> None:
    """A stream closed by the platform before it closes itself ends without its last frame."""
    assert CONFIG["functions"][file]["maxDuration"] >= STREAM_SELF_CLOSE_S[file] + 10


def test_each_queue_consumer_has_its_wire_topic_trigger() -> None:
    for file, topic in CONTRACT_TOPICS.items():
        assert CONFIG["functions"][file]["experimentalTriggers"] == [{"type": "queue/v2beta", "topic": topic}]


@pytest.mark.parametrize("file", API_FILES)
def test_every_api_file_is_reachable_and_exposes_only_app(file: str) -> None:
    route = next(route for route in ROUTES if route.file == file)
    concrete = route.pattern.replace("{", "").replace("}", "")
    assert resolve(ROUTES, concrete)[0].file == file
    tree = ast.parse((PROJECT_ROOT / file).read_text())
    bound = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    } | {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    assert "app" in bound, f"{file} must define a top-level `app`"
    assert "handler" not in bound, f"{file} must not bind `handler` (Vercel would take it for a BaseHTTPRequestHandler)"


def test_every_path_gets_the_security_headers_the_functions_send() -> None:
    """What Vercel serves itself (``public/``) carries the headers the function apps add to
    theirs (``lib.http.security_headers``), and Vercel's edge adds HSTS to everything: one
    entry, for every path."""
    assert [entry["source"] for entry in CONFIG["headers"]] == ["/(.*)"]
    assert {item["key"]: item["value"] for item in CONFIG["headers"][0]["headers"]} == EDGE_HEADERS
