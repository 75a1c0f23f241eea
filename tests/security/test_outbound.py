"""Outbound requests a tenant can aim, tried as an attacker would: every refused destination of
the egress guard, as a webhook endpoint and as a feed URL, by literal address, by a host name
resolving to it (``localhost``, the test's DNS) and as a redirect target. A case is bad when the
counting server on that address got a request, when this process even dialled the destination
(``recorded_connects``), or when the delivery log or feed state does not say ``destination
refused: …`` — or names the address a host name resolved to. The whole tick, served, answers 200
with every such URL stored."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lib.db.state_store import set_state
from lib.egress.client import resolving_with
from lib.egress.destinations import NAME_REFUSED
from lib.platform.aggregation.build import build_catalog
from lib.platform.aggregation.sources import Catalog, CatalogKey, Feed
from lib.platform.alerts.evaluation import evaluate_alert_rules
from lib.platform.alerts.rules import AlertRule, rules_key
from tests.support.auth import TEST_CRON_SECRET
from tests.support.catalogs import add_tenant, set_catalog
from tests.support.env import allow_egress
from tests.support.feeds import rss
from tests.support.outbound import Counting, TestResolver, connected_to_port, recorded_connects
from tests.support.security import record
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.security

# Literal destinations; {p} is the port of the counting servers on 127.0.0.1 and ::1.
LITERALS = {
    "loopback": "http://127.0.0.1:{p}/hook",
    "loopback as one decimal number": "http://2130706433:{p}/",
    "loopback, short form": "http://127.1:{p}/",
    "loopback, hex and short": "http://0x7f.1:{p}/",
    "loopback, octal": "http://0177.0.0.1:{p}/",
    "IPv6 loopback": "http://[::1]:{p}/",
    "IPv4-mapped loopback": "http://[::ffff:127.0.0.1]:{p}/",
    "IPv4-compatible loopback": "http://[::127.0.0.1]:{p}/",
    "6to4 of loopback": "http://[2002:7f00:1::1]:{p}/",
    "this network (0.0.0.0)": "http://0.0.0.0:{p}/",
    "the Lambda runtime API": "http://127.0.0.1:9001/2018-06-01/runtime/invocation/next",
    "private 10/8": "http://10.0.0.5:8080/",
    "private 172.16/12": "http://172.16.0.1:81/",
    "private 192.168/16": "http://192.168.1.1:82/",
    "cloud metadata": "http://169.254.169.254:83/latest/meta-data/",
    "ECS task credentials": "http://169.254.170.2:84/v2/credentials",
    "IPv4-mapped metadata": "http://[::ffff:169.254.169.254]:85/",
    "NAT64 of metadata": "http://[64:ff9b::a9fe:a9fe]:86/",
    "CGNAT": "http://100.64.0.1:87/",
    "multicast": "http://224.0.0.1:88/",
    "reserved": "http://240.0.0.1:89/",
    "broadcast": "http://255.255.255.255:90/",
    "unique local (fc00::/7)": "http://[fd00::1]:91/",
    "IPv6 link-local": "http://[fe80::1]:92/",
}
# Host names and what the test's DNS answers for them ("localhost" is the system's).
NAMES = {
    "localhost": ("http://localhost:{p}/", None),
    "a name for loopback": ("http://loopback.test:{p}/", ["127.0.0.1"]),
    "a name for IPv6 loopback": ("http://six.test:{p}/", ["::1"]),
    "a name for metadata": ("http://metadata.test:93/latest/", ["169.254.169.254"]),
    "a name for ECS credentials": ("http://ecs.test:94/v2/credentials", ["169.254.170.2"]),
    "a name for a private address": ("http://internal.test:95/", ["10.0.0.5"]),
    "a name for CGNAT": ("http://cgnat.test:96/", ["100.64.0.1"]),
    "a name for unique local": ("http://ula.test:97/", ["fd00::1"]),
    "a name for mapped loopback": ("http://mapped.test:{p}/", ["::ffff:127.0.0.1"]),
    "a name with one public and one loopback address": ("http://mixed.test:{p}/", ["93.184.215.14", "127.0.0.1"]),
}
RESOLVER = TestResolver({url.split("//")[1].split(":")[0]: [answers] for url, answers in NAMES.values() if answers})
FROG = {"id": "s-frog", "headline": "Frog discovered", "summary": "A new frog."}


@dataclass
class Canaries:
    """Counting servers on the loopback addresses a refused URL could reach, on one port."""

    port: int
    servers: list[Counting]

    def reached(self) -> int:
        return sum(server.count for server in self.servers)


@pytest.fixture
def canaries() -> Iterator[Canaries]:
    four, six = Counting(), Counting()
    with serve_in_thread(four.app) as url:
        port = int(url.rsplit(":", 1)[1])
        with serve_in_thread(six.app, host="::1", port=port):
            yield Canaries(port, [four, six])


class Redirector:
    """The public feed that answers ``302 Location: <u>`` (stands for a host on the internet:
    it is the one loopback server the test allows)."""

    async def redirect(self, request: Request) -> Response:
        return Response(status_code=302, headers={"Location": request.query_params["u"]})

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/to", self.redirect, methods=["GET", "POST"])])


def cases(port: int, redirector_url: str) -> dict[str, tuple[str, int | None]]:
    """Every case: its URL, and the port it would dial (to find an attempt in the record)."""
    literal = {name: url.format(p=port) for name, url in LITERALS.items()}
    named = {name: url.format(p=port) for name, (url, _) in NAMES.items()}
    direct = {**literal, **named}
    redirected = {f"redirect to {name}": f"{redirector_url}/to?u={quote(url, safe='')}" for name, url in direct.items()}
    every = {**direct, **redirected}
    return {name: (url, _port_of(direct.get(name.removeprefix("redirect to "), url))) for name, url in every.items()}


def kind(name: str) -> str:
    """The SECURITY.md row of a case: how the refused destination was reached for."""
    if name.startswith("redirect to "):
        return f"as a redirect target ({len(LITERALS) + len(NAMES)} destinations)"
    if name in NAMES:
        return f"by a host name resolving to one ({len(NAMES)} names)"
    return f"by literal address ({len(LITERALS)} addresses and spellings)"


def _port_of(url: str) -> int | None:
    found = re.search(r":(\d+)/", url.split("//", 1)[1])
    return int(found[1]) if found else None


def leaked_address(detail: str) -> bool:
    return bool(re.search(r"\d+\.\d+\.\d+\.\d+|[0-9a-f]*::[0-9a-f:]*", detail or ""))


def judge(dial_port: int | None, detail: str | None, connects: list) -> int:
    """1 when the destination was dialled, or the detail is not a refusal or names an address."""
    refused = (detail or "").startswith("destination refused: ")
    dialled = dial_port is not None and connected_to_port(connects, dial_port)
    return int(dialled or not refused or leaked_address(detail or ""))


async def test_no_webhook_reaches_a_refused_destination(db, set_env, canaries: Canaries) -> None:
    with serve_in_thread(Redirector().app, host="127.0.0.3") as redirector_url:
        allow_egress(set_env, redirector_url)
        every = cases(canaries.port, redirector_url)
        rules = [
            AlertRule(id=f"r{index}", keywords=["frog"], channel="webhook", endpoint=url)
            for index, (url, _) in enumerate(every.values())
        ]
        with resolving_with(RESOLVER), recorded_connects() as connects:
            assert await evaluate_alert_rules("org_hostile", [FROG], rules) == len(rules)
    logged = {
        row[0]: row[1:]
        for row in await (
            await db.execute(
                "SELECT a.rule_id, d.response_code, d.status, d.detail, d.endpoint FROM delivery_logs d"
                " JOIN alert_history a ON a.id = d.delivery_id"
            )
        ).fetchall()
    }
    bad_cases = []
    for index, (name, (_url, port)) in enumerate(every.items()):
        code, status, detail, endpoint = logged[f"r{index}"]
        if name.startswith("redirect to "):
            # Webhooks follow no redirect: the 302 is the receiver's answer, and the target is never asked.
            bad = int(code != 302 or status != "failed" or connected_to_port(connects, port or -1))
        else:
            bad = judge(port, detail, connects) or int((code, status) != (0, "failed"))
        bad = bad or int("/hook" in (endpoint or "") or "?" in (endpoint or ""))
        record("outbound", f"webhook {kind(name)}", tried=1, bad=bad)
        if bad:
            bad_cases.append((name, code, status, detail))
    record("outbound", "webhooks: a request reached a loopback server", tried=1, bad=int(canaries.reached() > 0))
    assert canaries.reached() == 0
    assert bad_cases == [], "\n".join(map(str, bad_cases))


async def test_no_feed_fetch_reaches_a_refused_destination(db, set_env, canaries: Canaries) -> None:
    with serve_in_thread(Redirector().app, host="127.0.0.3") as redirector_url:
        allow_egress(set_env, redirector_url)
        every = cases(canaries.port, redirector_url)
        catalog = Catalog(CatalogKey("hostile", "en"), tuple(Feed(url) for url, _ in every.values()))
        with resolving_with(RESOLVER), recorded_connects() as connects:
            built = await build_catalog(catalog, None)
    bad_cases = []
    for name, (url, port) in every.items():
        state = built["feeds"][url]
        bad = judge(port, state["error"], connects) or int(state["status"] != "failed")
        record("outbound", f"feed {kind(name)}", tried=1, bad=bad)
        if bad:
            bad_cases.append((name, state["status"], state["error"]))
    record("outbound", "feeds: a request reached a loopback server", tried=1, bad=int(canaries.reached() > 0))
    assert canaries.reached() == 0
    assert bad_cases == [], "\n".join(map(str, bad_cases))


async def test_dns_rebinding_cannot_reach_loopback(db, set_env) -> None:
    """The test's DNS answers an allowed address first and loopback second: the request goes to
    the address that was checked, and nothing reaches loopback."""
    checked, rebound = Counting(), Counting()
    with serve_in_thread(checked.app, host="127.0.0.2") as checked_url:
        port = int(checked_url.rsplit(":", 1)[1])
        with serve_in_thread(rebound.app, port=port):
            set_env(ERMIS_EGRESS_ALLOW="127.0.0.2/32")
            url = f"http://rebind.test:{port}/feed.xml"
            resolvers = [TestResolver({"rebind.test": [["127.0.0.2"], ["127.0.0.1"]]}) for _ in range(2)]
            with resolving_with(resolvers[0]):
                rule = AlertRule(id="rebind", keywords=["frog"], channel="webhook", endpoint=url)
                await evaluate_alert_rules("org_rebind", [FROG], [rule])
            with resolving_with(resolvers[1]):
                await build_catalog(Catalog(CatalogKey("rebind", "en"), (Feed(url),)), None)
    # One question to the DNS per request: the answer checked is the answer connected to.
    assert [resolver.asked for resolver in resolvers] == [{"rebind.test": 1}] * 2
    bad = int(rebound.count > 0 or checked.count != 2)
    record("outbound", "DNS rebinding (public first, loopback second)", tried=2, bad=bad)
    assert (checked.count, rebound.count) == (2, 0)
    assert checked.requests[0]["host"] == f"rebind.test:{port}"  # the URL's Host, not the pinned address


async def test_the_tick_answers_200_with_every_hostile_url_stored(
    db, redis, set_env, canaries: Canaries, served_url: str
) -> None:
    frog_feed = rss("Frogs", [("Frog discovered", "https://example.com/frog", "A new frog.")])
    with (
        serve_in_thread(Redirector().app, host="127.0.0.3") as redirector_url,
        serve_in_thread(_static(frog_feed)) as feed_url,
    ):
        allow_egress(set_env, redirector_url, feed_url)
        every = cases(canaries.port, redirector_url)
        urls = [url for url, _ in every.values()]
        bad_urls = ["http://[x", "http://a\tb/", "http://a\u0001b/", "http://" + "a" * 10_000, "file:///etc/passwd"]
        await set_catalog(db, "default", [*urls, *bad_urls, f"{feed_url}/frogs.xml"])
        await add_tenant(db, "org_hostile", "default")
        rules = [
            {"id": f"r{i}", "keywords": ["frog"], "channel": "webhook", "endpoint": url} for i, url in enumerate(urls)
        ]
        await set_state(rules_key("org_hostile"), rules)
        with resolving_with(RESOLVER):
            async with httpx.AsyncClient(base_url=served_url, timeout=120) as client:
                response = await client.get(
                    "/api/admin/rss/refresh", headers={"authorization": f"Bearer {TEST_CRON_SECRET}"}
                )
    body = response.json()
    bad = int(response.status_code != 200 or canaries.reached() > 0)
    record("outbound", "the whole tick with every hostile URL stored (feeds and webhooks)", tried=1, bad=bad)
    assert response.status_code == 200, body
    assert body["alertSweep"]["failed"] == 0 and body["alertSweep"]["evaluated"] >= 1
    assert canaries.reached() == 0
    fired = await (
        await db.execute("SELECT count(*) FROM alert_history WHERE tenant_scope_id = 'org_hostile'")
    ).fetchone()
    assert fired[0] == len(rules)  # the good feed's story was built and matched every rule


def _static(feed: str) -> Starlette:
    async def serve(_request: Request) -> Response:
        return Response(feed, media_type="application/rss+xml")

    return Starlette(routes=[Route("/frogs.xml", serve)])


async def nxdomain_or(host: str, port: int) -> list[str]:
    """The test's DNS, where ``missing.test`` does not exist and ``empty.test`` has no address."""
    if host == "missing.test":
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [] if host == "empty.test" else await RESOLVER(host, port)


async def webhook_outcomes(db) -> dict[str, tuple]:
    """Per rule: every delivery-log row (code, status, detail) and the delivery's end."""
    rows = await (
        await db.execute(
            "SELECT a.rule_id, d.response_code, d.status, d.detail FROM delivery_logs d"
            " JOIN alert_history a ON a.id = d.delivery_id ORDER BY d.created_at"
        )
    ).fetchall()
    ends = await (await db.execute("SELECT rule_id, status, attempts, last_detail FROM webhook_deliveries")).fetchall()
    outcomes: dict[str, tuple] = {}
    for rule_id, *logged in rows:
        outcomes[rule_id] = (*outcomes.get(rule_id, ()), tuple(logged))
    return {rule_id: (outcomes.get(rule_id, ()), tuple(end)) for rule_id, *end in ends}


async def test_a_name_that_does_not_exist_reads_exactly_like_a_name_that_is_refused(db, set_env) -> None:
    """An internal name that exists (resolving to a private address) and names that do not
    (NXDOMAIN, no address): each delivery ends at once, dead after one attempt, with one log
    row whose words are the same — a tenant cannot tell which internal names exist."""
    names = {"exists": "http://internal.test:95/", "missing": "http://missing.test:95/", "empty": "http://empty.test/"}
    rules = [AlertRule(id=rule, keywords=["frog"], channel="webhook", endpoint=url) for rule, url in names.items()]
    with resolving_with(nxdomain_or):
        assert await evaluate_alert_rules("org_probe", [FROG], rules) == len(rules)
    outcomes = await webhook_outcomes(db)
    expected = (
        ((0, "failed", f"destination refused: {NAME_REFUSED}"),),
        ("dead", 1, f"destination refused: {NAME_REFUSED}"),
    )
    bad = sum(outcomes[rule] != expected for rule in names)
    record(
        "outbound", "a name that does not exist against one that is refused: the same rows", tried=len(names), bad=bad
    )
    assert outcomes == dict.fromkeys(names, expected)


MALFORMED_HOSTS = [
    "http://xn--localhost-/",
    "http://xn--/x",
    "http://xn--a/",
    "http://xn--zz-0000/",
    "http://a.xn--ls8h.xn--/",
    "http://éé--.example/",
    "http://a..b/",
    "http://.leading.example/",
    "http://a.example../",
    "http://" + "l" * 64 + ".example/",
    "http://under%20score.example/",
    "http://\u200b.example/",
    "http://ex\u00adample.com/",
]


async def test_a_malformed_host_is_one_final_invalid_row_and_no_error_report(
    db, set_env, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = [
        AlertRule(id=f"m{index}", keywords=["frog"], channel="webhook", endpoint=url)
        for index, url in enumerate(MALFORMED_HOSTS)
    ]
    with resolving_with(nxdomain_or), recorded_connects() as connects:
        assert await evaluate_alert_rules("org_idna", [FROG], rules) == len(rules)
        built = await build_catalog(
            Catalog(CatalogKey("idna", "en"), tuple(Feed(url) for url in MALFORMED_HOSTS)), None
        )
    outcomes, reports = await webhook_outcomes(db), capsys.readouterr().err
    bad_cases = []
    for index, url in enumerate(MALFORMED_HOSTS):
        [(code, status, detail)], (end, attempts, _) = outcomes[f"m{index}"]
        feed = built["feeds"][url]
        bad = (code, status, end, attempts) != (0, "failed", "dead", 1) or not detail.startswith("invalid URL: ")
        bad = bad or feed["status"] != "failed" or not feed["error"].startswith("invalid URL: ")
        if bad:
            bad_cases.append((url, code, status, detail, end, attempts, feed["error"]))
    bad_cases += [("error report", line) for line in reports.splitlines() if '"level": "error"' in line]
    record("outbound", f"malformed host names ({len(MALFORMED_HOSTS)}: bad IDNA, empty labels), webhook and feed",
           tried=2 * len(MALFORMED_HOSTS), bad=len(bad_cases) + len(connects))  # fmt: skip
    assert (bad_cases, connects) == ([], [])
