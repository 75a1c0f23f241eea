"""What ``vercel build`` (the pinned CLI, offline) makes of the tree: one function per ``api/``
file, each vendoring every runtime pin and none of the development files, the five crons, the
queue triggers under the consumer names our code subscribes with, the durations, and routes
that our dev server's router agrees with."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from lib.bundle import PROJECT_ROOT, read_vercel_config
from lib.http.security_headers import EDGE_HEADERS
from lib.local.queue_bridge import queue_triggers
from lib.local.routing import discover_routes, resolve
from lib.queues.consumer_names import vercel_consumer_name
from lib.runtime.functions import function_module_name
from tests.support.vercel_build import BuildOutput, normalise_distribution

ROUTES = discover_routes(PROJECT_ROOT)
API_FILES = sorted(route.file for route in ROUTES)
DEVELOPMENT_ONLY = (
    "tests/",
    "scripts/",
    "benchmarks/",
    "lib/local/",
    "lib/ops/",
    "lib/runtime/aws/",
    "docs/",
    ".ci/",
    "requirements-dev.txt",
    "requirements-aws.txt",
    "requirements-serve.txt",
    "Dockerfile",
)


def runtime_pins() -> set[str]:
    pins = set()
    for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            name = name.split("[", 1)[0]  # psycopg[binary] → psycopg
            pins.add(f"{normalise_distribution(name)}=={version}")
    return pins


def test_the_builder_installs_from_requirements_txt(vercel_output: BuildOutput) -> None:
    assert "Installing required dependencies from requirements.txt..." in vercel_output.log


def test_every_api_file_is_a_function(vercel_output: BuildOutput) -> None:
    assert sorted(function.source_file for function in vercel_output.functions.values()) == API_FILES


@pytest.mark.parametrize("file", API_FILES)
def test_every_function_vendors_the_runtime_pins_and_no_development_file(vercel_output: BuildOutput, file: str) -> None:
    function = vercel_output.function_for_file(file)
    assert function.config["runtime"] == "python3.12"
    missing = runtime_pins() - function.vendored_distributions()
    assert not missing, f"{file} ships without {sorted(missing)}"
    shipped = [path for path in function.file_path_map if path.startswith(DEVELOPMENT_ONLY)]
    assert not shipped, f"{file} ships development files: {shipped[:5]}"
    assert file in function.file_path_map and "lib/bundle.py" in function.file_path_map


@pytest.mark.parametrize("file", API_FILES)
def test_the_dev_server_loads_each_function_as_vercels_bootstrap_does(vercel_output: BuildOutput, file: str) -> None:
    handler = (vercel_output.function_for_file(file).directory / "vc__handler__python.py").read_text()
    settings = dict(re.findall(r'"(__VC_HANDLER_[A-Z_]+)": "([^"]*)"', handler))
    assert settings["__VC_HANDLER_ENTRYPOINT"] == file
    assert settings["__VC_HANDLER_MODULE_NAME"] == function_module_name(file)
    assert settings["__VC_HANDLER_VARIABLE_NAME"] == "app"


def test_the_five_crons(vercel_output: BuildOutput) -> None:
    assert vercel_output.config["crons"] == read_vercel_config()["crons"]


def test_queue_triggers_carry_the_consumer_names_our_consumers_subscribe_with(vercel_output: BuildOutput) -> None:
    declared = {trigger.path: trigger for trigger in queue_triggers(PROJECT_ROOT)}
    assert len(declared) == 5  # the four rss.* stages and webhooks.deliver
    for trigger in declared.values():
        file = resolve(ROUTES, trigger.path)[0].file
        [built] = vercel_output.function_for_file(file).config["experimentalTriggers"]
        assert built == {"type": "queue/v2beta", "topic": trigger.topic, "consumer": trigger.consumer}
        assert built["consumer"] == vercel_consumer_name(file)


@pytest.mark.parametrize("file", sorted(read_vercel_config()["functions"]))
def test_declared_durations_reach_the_functions(vercel_output: BuildOutput, file: str) -> None:
    declared = read_vercel_config()["functions"][file].get("maxDuration")
    assert vercel_output.function_for_file(file).config.get("maxDuration") == declared


def vercel_route(output: BuildOutput, path: str) -> tuple[str, dict[str, str]] | None:
    """Where Vercel's Build Output sends ``path``: the filesystem first (a function by its name,
    an ``index`` function also by its folder's), then ``config.json``'s routes in order up to
    ``handle: error`` — a ``dest`` with ``check`` is looked up in the filesystem, a ``status``
    ends the search."""

    def on_filesystem(candidate: str) -> str | None:
        name = candidate.strip("/")
        for option in (name, f"{name}/index"):
            if option in output.functions:
                return output.functions[option].source_file
        return None

    if (found := on_filesystem(path)) is not None:
        return found, {}
    routes = output.config["routes"]
    start = next(i for i, route in enumerate(routes) if route.get("handle") == "filesystem") + 1
    for route in routes[start:]:
        if route.get("handle") == "error":
            return None
        match = re.match(route["src"], path) if "src" in route else None
        if match is None:
            continue
        if "status" in route:
            return None
        destination = urlsplit(match.expand(re.sub(r"\$(\d+)", r"\\\1", route["dest"])))
        if (found := on_filesystem(destination.path)) is not None:
            return found, dict(parse_qsl(destination.query))
    return None


def sample_paths() -> list[str]:
    paths = ["/api", "/api/nope", "/api/admin", "/api/stories", "/api/stories/a/b/events"]
    for route in ROUTES:
        concrete = re.sub(r"\{[^}]+\}", "story-1", route.pattern)
        paths += [concrete, concrete + "/index" if Path(route.file).stem == "index" else concrete + "/x"]
    return sorted(set(paths))


@pytest.mark.parametrize("path", sample_paths())
def test_the_dev_servers_router_agrees_with_vercels_routes(vercel_output: BuildOutput, path: str) -> None:
    found = resolve(ROUTES, path)
    ours = (found[0].file, found[1]) if found else None
    assert ours == vercel_route(vercel_output, path)


def vercel_headers(output: BuildOutput, path: str) -> dict[str, str]:
    """The headers Vercel's routes put on the answer for ``path``: those of every route before
    ``handle: filesystem`` whose ``src`` matches it (``vercel.json``'s ``headers``, compiled by
    Vercel's builder), later ones over earlier."""
    headers: dict[str, str] = {}
    for route in output.config["routes"]:
        if route.get("handle") == "filesystem":
            break
        if "headers" in route and re.match(route["src"], path):
            headers.update(route["headers"])
    return headers


STATIC_PAGES = ("admin/index.html", "admin/main.js", "admin/console.js", "admin/console.css", "realtime-demo.html",
                "realtime-demo.js", "realtime-demo.css", "ermis-realtime.js")  # fmt: skip


@pytest.mark.parametrize("path", ["/admin/", "/admin/index.html", *(f"/{page}" for page in STATIC_PAGES), "/api/feed"])
def test_what_vercel_serves_carries_the_security_headers(vercel_output: BuildOutput, path: str) -> None:
    """The pages Vercel serves itself get the headers the function apps add (checked under
    Vercel's runtime in ``test_built_functions``), and every answer gets HSTS: from
    ``vercel.json``, through Vercel's builder."""
    assert {name.lower(): value for name, value in vercel_headers(vercel_output, path).items()} == {
        name.lower(): value for name, value in EDGE_HEADERS.items()
    }


def test_the_pages_are_static_output_and_the_dev_sign_in_is_not_deployed(vercel_output: BuildOutput) -> None:
    static = vercel_output.output_dir / "static"
    for page in STATIC_PAGES:
        assert (static / page).read_bytes() == (PROJECT_ROOT / "public" / page).read_bytes(), page
    assert vercel_route(vercel_output, "/__dev/sign-in") is None
    assert not any(path.startswith("__dev") for path in vercel_output.functions)


def test_the_shipped_build_precompiles_every_function(vercel_output: BuildOutput) -> None:
    """``vercel.json``'s ``build.env`` turns on the builder's bytecode precompilation (issue 23:
    it halves a cold start); each function ships its own file and our code as ``.pyc``."""
    assert "Compiling Python bytecode..." in vercel_output.log
    for function in vercel_output.functions.values():
        source = Path(function.source_file)
        compiled = {path for path in function.file_path_map if path.endswith(".cpython-312.pyc")}
        own = (source.parent / "__pycache__" / f"{source.stem}.cpython-312.pyc").as_posix()
        assert own in compiled, f"{function.name} ships without its own bytecode"
        assert "lib/http/__pycache__/app.cpython-312.pyc" in compiled, function.name
