"""Which destinations a tenant's URL may reach, decided before a request and again at connect.

A URL is refused before anything is resolved when its scheme is not ``http``/``https`` or it
carries credentials (``user:pass@``: httpx would send them as ``Authorization``), and is invalid
when it holds a control character or a space, has no host, or is longer than ``MAX_URL_CHARS``.
Ports are not limited: a public receiver on any port is legitimate, and what a port could reach
inside our network is already closed by the address rule.

At connect (``checked_addresses``) the host is resolved once and every address must be public.
Refused, with the reason the detail names (never the address the name resolved to):

- IPv4: this network ``0.0.0.0/8``, private (RFC 1918), shared/CGNAT ``100.64.0.0/10``, loopback,
  link-local ``169.254.0.0/16`` (cloud metadata, ECS task credentials), IETF assignments,
  documentation, benchmarking, multicast and the reserved ``240.0.0.0/4`` (broadcast included);
- IPv6: unspecified, loopback, discard, IETF assignments (Teredo included), documentation,
  unique local ``fc00::/7``, link-local, site-local, multicast, and anything outside global
  unicast ``2000::/3``; an IPv4 address embedded in IPv6 (IPv4-mapped ``::ffff:a.b.c.d``,
  IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) is judged as IPv4;
- a numeric host in any spelling the C library accepts (``2130706433``, ``127.1``, ``0x7f.1``)
  is that address, read with ``inet_aton`` as the resolver would, never looked up by name.

``ERMIS_EGRESS_ALLOW`` (comma-separated) names the private destinations a deployment really
uses: a host name (``feeds.internal``) or ``name:port`` allows that URL host whatever it resolves
to (still pinned); an address or CIDR block, with or without a port (``10.1.0.0/16``,
``127.0.0.1:8080``, ``[fd00::5]:443``), allows the addresses inside it. Empty by default
everywhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, urlsplit

from lib.lazy_imports import lazy_import
from lib.settings import SettingsError, get_settings

idna = lazy_import("idna")

MAX_URL_CHARS = 2048
ALLOWED_SCHEMES = frozenset({"http", "https"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


class OutboundFailure(Exception):
    """An outbound request that could not be made; ``detail`` is safe to store and show."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class DestinationRefused(OutboundFailure):
    def __init__(self, reason: str) -> None:
        super().__init__(f"destination refused: {reason}")


class InvalidDestination(OutboundFailure):
    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid URL: {reason}")


# Every refusal of a host *name* reads the same, whether the name resolves to nothing or to an
# address we refuse: a tenant aiming webhooks at names cannot tell which internal names exist.
NAME_REFUSED = "the host name does not resolve to a public address"


_V4_REFUSED = [
    (ipaddress.ip_network(block), reason)
    for block, reason in [
        ("0.0.0.0/8", "a this-network address"),
        ("10.0.0.0/8", "a private address"),
        ("100.64.0.0/10", "a shared (CGNAT) address"),
        ("127.0.0.0/8", "a loopback address"),
        ("169.254.0.0/16", "a link-local (metadata) address"),
        ("172.16.0.0/12", "a private address"),
        ("192.0.0.0/24", "an IETF-reserved address"),
        ("192.0.2.0/24", "a documentation address"),
        ("192.88.99.0/24", "a reserved (6to4 relay) address"),
        ("192.168.0.0/16", "a private address"),
        ("198.18.0.0/15", "a benchmarking address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("224.0.0.0/4", "a multicast address"),
        ("240.0.0.0/4", "a reserved address"),
    ]
]
_V6_REFUSED = [
    (ipaddress.ip_network(block), reason)
    for block, reason in [
        ("::/128", "the unspecified address"),
        ("::1/128", "a loopback address"),
        ("64:ff9b:1::/48", "a reserved (local NAT64) address"),
        ("100::/64", "a reserved (discard) address"),
        ("2001::/23", "an IETF-reserved address"),
        ("2001:db8::/32", "a documentation address"),
        ("fc00::/7", "a unique-local address"),
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local address"),
        ("ff00::/8", "a multicast address"),
    ]
]
_V6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if (address in _V4_COMPATIBLE and int(address) > 1) or address in _NAT64:
        return ipaddress.IPv4Address(address.packed[-4:])
    return None


def refusal_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not public (``"a loopback address"``...), or ``None`` if it is."""
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = refusal_reason(inner)
        return None if reason is None else f"{reason} embedded in IPv6"
    table = _V4_REFUSED if isinstance(address, ipaddress.IPv4Address) else _V6_REFUSED
    for network, reason in table:
        if address in network:
            return reason
    if isinstance(address, ipaddress.IPv6Address) and address not in _V6_GLOBAL_UNICAST:
        return "a reserved address"
    # The standard library's own registry, for any block added to IANA's tables since.
    return None if address.is_global else "an address that is not globally routable"


def numeric_host(host: str) -> IPAddress | None:
    """The address a host written as an address denotes, in any spelling the resolver accepts:
    an IPv6 literal, a dotted quad, or ``inet_aton``'s shorter, decimal, octal and hex forms."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if not re.fullmatch(r"[0-9a-fA-FxX.]+", host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


@dataclass(frozen=True)
class AllowList:
    names: frozenset[tuple[str, int | None]]
    networks: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None], ...]

    def allows_name(self, host: str, port: int) -> bool:
        name = host.lower().rstrip(".")
        return (name, None) in self.names or (name, port) in self.names

    def allows_address(self, address: IPAddress, port: int) -> bool:
        candidates = [address] + ([inner] if (inner := embedded_ipv4(address)) else [])
        return any(
            candidate in network and allowed_port in (None, port)
            for candidate in candidates
            for network, allowed_port in self.networks
            if candidate.version == network.version
        )


def _allow_entry(entry: str) -> tuple[str, object, int | None]:
    """One ``ERMIS_EGRESS_ALLOW`` entry as ``("name", host, port)`` or ``("network", net, port)``."""
    host, port = entry, None
    bracketed = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", entry)
    if bracketed:
        host, port = bracketed[1], int(bracketed[2]) if bracketed[2] else None
    elif entry.count(":") == 1:
        host, _, port_text = entry.partition(":")
        if not port_text.isdigit():
            raise ValueError(entry)
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError(entry)
    try:
        return "network", ipaddress.ip_network(host, strict=False), port
    except ValueError:
        pass
    if "/" in host or not re.fullmatch(r"[A-Za-z0-9._-]+", host):
        raise ValueError(entry)
    return "name", host.lower().rstrip("."), port


@lru_cache(maxsize=8)
def _parse_allow_list(raw: str) -> AllowList:
    names: set[tuple[str, int | None]] = set()
    networks: list = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        try:
            kind, value, port = _allow_entry(entry)
        except ValueError:
            raise SettingsError("ERMIS_EGRESS_ALLOW must be comma-separated hosts, host:port or CIDR blocks") from None
        if kind == "name":
            names.add((value, port))
        else:
            networks.append((value, port))
    return AllowList(frozenset(names), tuple(networks))


def allow_list() -> AllowList:
    return _parse_allow_list(get_settings().ermis_egress_allow or "")


def check_url(url: object) -> str:
    """The URL, if a request may be made to it at all; raises ``InvalidDestination`` or
    ``DestinationRefused`` saying why not (without echoing the URL)."""
    if not isinstance(url, str) or not url:
        raise InvalidDestination("empty")
    if len(url) > MAX_URL_CHARS:
        raise InvalidDestination(f"longer than {MAX_URL_CHARS} characters")
    if any(char.isspace() or ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in url):
        raise InvalidDestination("a control character or a space")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidDestination("the host or port does not parse") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        shown = scheme if re.fullmatch(r"[a-z][a-z0-9+.-]{0,15}", scheme) else "that"
        raise DestinationRefused(f"the scheme {shown} is not http or https")
    if "@" in parts.netloc:
        raise DestinationRefused("credentials in the URL")
    if not parts.hostname:
        raise InvalidDestination("no host")
    if port == 0:
        raise InvalidDestination("port 0")
    literal = numeric_host(parts.hostname)
    if literal is not None:
        # An address spelled in a form the URL parser would refuse (``0177.0.0.1``) is still
        # refused as the address it is, not as a parse error.
        _refuse_unless_allowed(literal, port or (443 if scheme == "https" else 80), written=True)
    else:
        _check_host_name(parts.hostname)
    return url


def _check_host_name(host: str) -> None:
    """A DNS name, or ``InvalidDestination``: no empty label (``a..b``), labels of letters,
    digits, ``-`` and ``_`` within DNS's lengths, and every international label (non-ASCII, or
    an ``xn--`` A-label) valid IDNA 2008 — checked here, so that no malformed name reaches the
    HTTP client (which would raise while building the request)."""
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or any(not label for label in labels):
        raise InvalidDestination("the host name has an empty or overlong label")
    for label in labels:
        international = not label.isascii() or label.startswith("xn--")
        try:
            ascii_label = idna.encode(label).decode("ascii") if international else label
            if international:
                idna.decode(ascii_label)
        except (idna.IDNAError, UnicodeError):
            raise InvalidDestination("the host name is not a valid international (IDNA) name") from None
        if not re.fullmatch(r"[a-z0-9_-]{1,63}", ascii_label.lower()):
            raise InvalidDestination("the host name has a character or label length DNS does not allow")


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver, in its order, each once."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def checked_addresses(host: str, port: int, resolver: Resolver) -> list[str]:
    """The addresses a connection to ``host:port`` may use, resolved once; raises
    ``DestinationRefused`` unless every one is public or allowed (an allowed name is not
    checked, only pinned)."""
    allowed = allow_list()
    literal = numeric_host(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            answers = await resolver(host, port)
        except (OSError, UnicodeError):
            raise DestinationRefused(NAME_REFUSED) from None
        addresses = [ipaddress.ip_address(answer.split("%", 1)[0]) for answer in answers]
        if not addresses:
            raise DestinationRefused(NAME_REFUSED)
        if allowed.allows_name(host, port):
            return [str(address) for address in addresses]
    for address in addresses:
        _refuse_unless_allowed(address, port, written=literal is not None)
    return [str(address) for address in addresses]


def _refuse_unless_allowed(address: IPAddress, port: int, written: bool) -> None:
    """``written``: the URL wrote the address, so its reason is said (the tenant knows the
    address); an address a name resolved to is refused as ``NAME_REFUSED``."""
    reason = refusal_reason(address)
    if reason is not None and not allow_list().allows_address(address, port):
        raise DestinationRefused(f"the host is {reason}" if written else NAME_REFUSED)


def redact_url(url: str | None) -> str:
    """A stored URL as it may be shown to members and written to logs: ``scheme://host/…``
    (port kept when given; credentials, path and query dropped — a Slack or Discord webhook's
    path is its credential)."""
    return _shown_url(url, with_path=False)


def display_url(url: str | None) -> str:
    """A feed's URL as members may read it, where the feed has no name: ``scheme://host/path``
    (port kept; credentials, query and fragment dropped — a catalog URL's token rides in its
    query). Characters outside a URL's own are percent-encoded, so the form is plain text."""
    return _shown_url(url, with_path=True)


def _shown_url(url: str | None, with_path: bool) -> str:
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(invalid URL)"
    try:
        host = (parts.hostname or "").encode("idna").decode("ascii")  # an IDN host as the DNS sees it
    except UnicodeError:
        return "(invalid URL)"
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,253}", host) or not re.fullmatch(r"[a-z][a-z0-9+.-]{0,15}", parts.scheme):
        return "(invalid URL)"
    shown_host = f"[{host}]" if ":" in host else host
    path = (quote(parts.path, safe="/%-._~!$&'()*+,;=:@") or "/") if with_path else "/…"
    return f"{parts.scheme}://{shown_host}{f':{port}' if port is not None else ''}{path}"
