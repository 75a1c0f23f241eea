"""lib.egress.destinations: which addresses are refused (held against the standard library's
registry and, for numeric spellings, against the C library's own parser), the allow list, the
URL checks, and how a stored URL is shown."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lib.egress.destinations import (
    DestinationRefused,
    InvalidDestination,
    allow_list,
    check_url,
    checked_addresses,
    display_url,
    numeric_host,
    redact_url,
    refusal_reason,
)
from lib.settings import SettingsError

REFUSED = [
    "0.0.0.0", "0.1.2.3",  # noqa: S104 - an address to refuse, not to bind
    "10.0.0.5", "100.64.0.1", "100.127.255.254", "127.0.0.1", "127.255.0.9",
    "169.254.169.254", "169.254.170.2", "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.0.2.1",
    "192.168.1.1", "198.18.0.1", "198.51.100.7", "203.0.113.9", "224.0.0.1", "239.255.255.250",
    "240.0.0.1", "255.255.255.255", "::", "::1", "::ffff:127.0.0.1", "::ffff:10.1.2.3",
    "::127.0.0.1", "::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1",
    "2002:7f00:1::1", "2002:a9fe:a9fe::", "2001::1", "2001:db8::1", "fc00::1", "fd12:3456::1",
    "fe80::1", "fec0::1", "ff02::1", "100::1", "4000::1",
]  # fmt: skip
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1"]


@pytest.mark.parametrize("address", REFUSED)
def test_every_non_public_address_is_refused(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None


@given(st.ip_addresses())
def test_nothing_the_standard_library_calls_non_global_passes(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    if refusal_reason(address) is None:
        assert address.is_global and not address.is_multicast


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_inside_ipv6_is_judged_as_itself(v4: ipaddress.IPv4Address) -> None:
    refused = refusal_reason(v4) is not None
    packed = int(v4)
    forms = [
        ipaddress.IPv6Address(0xFFFF << 32 | packed),  # IPv4-mapped
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | packed),  # NAT64
        ipaddress.IPv6Address(0x2002 << 112 | packed << 80),  # 6to4
    ]
    if packed > 1:
        forms.append(ipaddress.IPv6Address(packed))  # IPv4-compatible
    for form in forms:
        assert (refusal_reason(form) is not None) == refused, form


def _component(value: int, base: str) -> str:
    return {"dec": str(value), "hex": hex(value), "oct": "0" + oct(value)[2:] if value else "0"}[base]


@st.composite
def numeric_spellings(draw: st.DrawFn) -> str:
    """An IPv4 address as inet_aton reads it: one to four parts, each decimal, hex or octal."""
    address = draw(st.integers(0, 2**32 - 1))
    parts = draw(st.integers(1, 4))
    octets = list(address.to_bytes(4, "big"))
    values = [*octets[: parts - 1], int.from_bytes(bytes(octets[parts - 1 :]), "big")]
    return ".".join(_component(value, draw(st.sampled_from(["dec", "hex", "oct"]))) for value in values)


@given(st.one_of(numeric_spellings(), st.text(alphabet="0123456789abcdefx.", min_size=1, max_size=20)))
def test_numeric_hosts_are_read_as_the_c_library_reads_them(spelling: str) -> None:
    try:
        info = socket.getaddrinfo(spelling, None, socket.AF_INET, flags=socket.AI_NUMERICHOST)
        theirs = ipaddress.ip_address(info[0][4][0])
    except (socket.gaierror, UnicodeError):
        theirs = None
    assert numeric_host(spelling) == theirs


@pytest.mark.parametrize("spelling", ["2130706433", "127.1", "0x7f.1", "0177.0.0.1", "0x7f000001", "017700000001"])
def test_numeric_spellings_of_loopback_are_loopback(spelling: str) -> None:
    assert numeric_host(spelling) == ipaddress.ip_address("127.0.0.1")


def test_the_allow_list_takes_names_ports_addresses_and_blocks(set_env) -> None:
    set_env(ERMIS_EGRESS_ALLOW=" feeds.internal , hooks.internal:8443,10.1.0.0/16,127.0.0.1:8080,[fd00::5]:443,::1 ")
    allowed = allow_list()
    assert allowed.allows_name("FEEDS.internal.", 80) and allowed.allows_name("hooks.internal", 8443)
    assert not allowed.allows_name("hooks.internal", 443) and not allowed.allows_name("other.internal", 80)
    ip = ipaddress.ip_address
    assert allowed.allows_address(ip("10.1.200.3"), 80) and not allowed.allows_address(ip("10.2.0.1"), 80)
    assert allowed.allows_address(ip("127.0.0.1"), 8080) and not allowed.allows_address(ip("127.0.0.1"), 8081)
    assert allowed.allows_address(ip("fd00::5"), 443) and not allowed.allows_address(ip("fd00::5"), 80)
    assert allowed.allows_address(ip("::1"), 1) and allowed.allows_address(ip("::ffff:127.0.0.1"), 8080)


@pytest.mark.parametrize("entry", ["http://x", "10.0.0.0/33", "web:http", "a b", "h:0", "h:70000", "[::1"])
def test_an_allow_list_entry_that_does_not_parse_is_a_clear_error(set_env, entry: str) -> None:
    set_env(ERMIS_EGRESS_ALLOW=f"ok.internal,{entry}")
    with pytest.raises(SettingsError, match="ERMIS_EGRESS_ALLOW must be") as raised:
        allow_list()
    assert entry not in str(raised.value)


async def test_an_allowed_name_is_pinned_but_not_checked_and_others_are(set_env) -> None:
    set_env(ERMIS_EGRESS_ALLOW="metadata.internal")

    async def resolver(host: str, port: int) -> list[str]:
        return ["169.254.169.254"]

    assert await checked_addresses("metadata.internal", 80, resolver) == ["169.254.169.254"]
    with pytest.raises(DestinationRefused, match="does not resolve to a public address"):
        await checked_addresses("metadata.test", 80, resolver)


@pytest.mark.parametrize(
    ("url", "error", "detail"),
    [
        ("", InvalidDestination, "invalid URL: empty"),
        ("http://a b/", InvalidDestination, "invalid URL: a control character or a space"),
        ("http://a/\x7f", InvalidDestination, "invalid URL: a control character or a space"),
        ("http://[::1/", InvalidDestination, "invalid URL: the host or port does not parse"),
        ("http://a:99999/", InvalidDestination, "invalid URL: the host or port does not parse"),
        ("http:///path", InvalidDestination, "invalid URL: no host"),
        ("ftp://a/", DestinationRefused, "destination refused: the scheme ftp is not http or https"),
        ("javascript:alert(1)", DestinationRefused, "destination refused: the scheme javascript is not http or https"),
        ("https://u@a/", DestinationRefused, "destination refused: credentials in the URL"),
        ("http://0177.1/", DestinationRefused, "destination refused: the host is a loopback address"),
    ],
)
def test_check_url_says_why_without_echoing_the_url(url: str, error: type, detail: str) -> None:
    with pytest.raises(error) as raised:
        check_url(url)
    assert raised.value.detail == detail


@given(
    scheme=st.sampled_from(["http", "https"]),
    host=st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){1,2}", fullmatch=True),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    userinfo=st.one_of(st.none(), st.text(alphabet="abcXYZ123:", min_size=1, max_size=12)),
    path=st.text(alphabet="abcdefXYZ0123456789/-_.~%", max_size=40),
    query=st.text(alphabet="abcdef=&0123XYZ", max_size=20),
)
def test_a_shown_url_is_scheme_host_and_port_only(
    scheme: str, host: str, port: int | None, userinfo: str | None, path: str, query: str
) -> None:
    netloc = f"{userinfo + '@' if userinfo else ''}{host}{f':{port}' if port else ''}"
    url = f"{scheme}://{netloc}/{path}{'?' + query if query else ''}"
    assert redact_url(url) == f"{scheme}://{host}{f':{port}' if port else ''}/…"


@given(
    host=st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){1,2}", fullmatch=True),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    secret=st.from_regex(r"SECRET[a-z0-9]{4,12}", fullmatch=True),
    where=st.sampled_from(["userinfo", "password", "query", "fragment"]),
    path=st.text(alphabet="abcdefXYZ0123456789/-_.~", max_size=40),
)
def test_a_feed_s_display_url_keeps_its_path_and_drops_credentials_query_and_fragment(
    host: str, port: int | None, secret: str, where: str, path: str
) -> None:
    userinfo = {"userinfo": f"{secret}@", "password": f"reader:{secret}@"}.get(where, "")
    tail = {"query": f"?token={secret}", "fragment": f"#{secret}"}.get(where, "")
    authority = f"{host}{f':{port}' if port else ''}"
    shown = display_url(f"https://{userinfo}{authority}/{path}{tail}")
    assert shown == f"https://{authority}/{path}" and secret not in shown


def test_a_display_url_is_plain_text() -> None:
    assert display_url("https://h.example/a b/\u00e9<i>?x") == "https://h.example/a%20b/%C3%A9%3Ci%3E"
    assert display_url("https://h.example") == "https://h.example/"
    assert display_url("http://a\u0001b/") == "(invalid URL)"


def test_a_url_that_does_not_parse_is_shown_as_such() -> None:
    assert redact_url("http://[x") == "(invalid URL)" and redact_url("http://a\u0001b/") == "(invalid URL)"
    assert redact_url(None) == "" and redact_url("https://h/…") == "https://h/…"
    assert redact_url("https://bücher.example/hook?k=1") == "https://xn--bcher-kva.example/…"
