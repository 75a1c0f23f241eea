"""lib.local.routing: Vercel's file-routing rules, one at a time, and the dev router on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from lib.local.routing import discover_routes, resolve, route_for_file
from lib.local.server import VercelRouter
from tests.support.functions import client_for


def test_py_suffix_is_dropped() -> None:
    assert route_for_file("api/admin/flags.py").pattern == "/api/admin/flags"


def test_index_serves_its_folder() -> None:
    assert route_for_file("api/feed/index.py").pattern == "/api/feed"
    assert route_for_file("api/index.py").pattern == "/api"


def test_bracket_segments_become_parameters() -> None:
    route = route_for_file("api/stories/[storyId]/events.py")
    assert route.pattern == "/api/stories/{storyId}/events"
    assert route.match("/api/stories/s-42/events") == {"storyId": "s-42"}
    assert route.match("/api/stories/s-42/events/") == {"storyId": "s-42"}
    assert route.match("/api/stories/events") is None
    assert route.match("/api/stories/a/b/events") is None
    assert route_for_file("api/stories/[storyId]/index.py").match("/api/stories/x") == {"storyId": "x"}


def write_tree(root: Path, files: list[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("from starlette.applications import Starlette\napp = Starlette()\n")


def test_private_files_are_not_functions_and_static_beats_dynamic(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        [
            "api/stories/[storyId]/index.py",
            "api/stories/latest.py",
            "api/_shared.py",
            "api/_helpers/thing.py",
            "api/.hidden.py",
            "api/feed/index.py",
        ],
    )
    routes = discover_routes(tmp_path)
    assert sorted(route.file for route in routes) == [
        "api/feed/index.py",
        "api/stories/[storyId]/index.py",
        "api/stories/latest.py",
    ]
    assert resolve(routes, "/api/stories/latest")[0].file == "api/stories/latest.py"
    found, params = resolve(routes, "/api/stories/other")
    assert (found.file, params) == ("api/stories/[storyId]/index.py", {"storyId": "other"})
    assert resolve(routes, "/api/nothing") is None


def test_two_files_serving_one_path_is_an_error(tmp_path: Path) -> None:
    write_tree(tmp_path, ["api/feed.py", "api/feed/index.py"])
    with pytest.raises(ValueError, match="both serve /api/feed"):
        discover_routes(tmp_path)


async def test_dev_router_passes_the_full_path_and_adds_params_to_the_query(tmp_path: Path) -> None:
    (tmp_path / "api/stories/[storyId]").mkdir(parents=True)
    (tmp_path / "api/stories/[storyId]/events.py").write_text(
        "from starlette.applications import Starlette\n"
        "from starlette.responses import JSONResponse\n"
        "from starlette.routing import Route\n"
        "async def echo(request):\n"
        "    return JSONResponse({'path': request.url.path, 'param': request.path_params['storyId'],\n"
        "                         'query': dict(request.query_params)})\n"
        "app = Starlette(routes=[Route('/api/stories/{storyId}/events', echo)])\n"
    )
    (tmp_path / "public").mkdir()
    (tmp_path / "public/demo.html").write_text("<h1>demo</h1>")
    async with client_for(VercelRouter(tmp_path)) as client:
        echoed = (await client.get("/api/stories/s-1/events?x=1")).json()
        assert echoed == {"path": "/api/stories/s-1/events", "param": "s-1", "query": {"x": "1", "storyId": "s-1"}}
        static = await client.get("/demo.html")
        assert static.text == "<h1>demo</h1>" and static.headers["content-type"].startswith("text/html")
        missing = await client.get("/api/none")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert (await client.get("/../requirements.txt")).status_code == 404
