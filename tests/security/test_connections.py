"""Slow, idle and malformed connections against the server ``scripts/serve`` runs
(``lib.local.connections``), with the read deadlines shortened to 1 s: connections that never
send a request head, or trickle it, are closed within the head deadline however often they
send a byte; a body that stalls (or a chunk size announced and never sent) gets a 408 within the
body deadline; an over-long head or a chunk header that does not parse gets a 400 at once — and
a normal client is served meanwhile."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from lib.settings import get_settings
from tests.security.conftest import ROUTER
from tests.support.env import env_setter
from tests.support.security import record
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.security

CHUNKED = b"Transfer-Encoding: chunked\r\n\r\n"
DEADLINE_S = 1.0
SLACK_S = 2.0  # the deadline plus a scheduler's worth of lateness under 80 open sockets


@pytest.fixture(scope="module")
def strict_url(bundle_environment) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as patch:
        env_setter(patch)(ERMIS_HEADER_TIMEOUT_S=str(DEADLINE_S), ERMIS_BODY_TIMEOUT_S=str(DEADLINE_S))
        with serve_in_thread(ROUTER) as url:
            yield url
    get_settings.cache_clear()


def connect(url: str) -> socket.socket:
    address = urlsplit(url)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def closed_after(connection: socket.socket, trickle: bytes = b"", every: float = 0.2) -> float:
    """Seconds until the server closes ``connection`` while we send ``trickle`` a byte at a time."""
    started = time.monotonic()
    connection.settimeout(every)
    sent = 0
    while time.monotonic() - started < 30:
        try:
            if connection.recv(4096) == b"":
                return time.monotonic() - started
        except TimeoutError:
            pass
        except OSError:
            return time.monotonic() - started
        if sent < len(trickle):
            try:
                connection.send(trickle[sent : sent + 1])
            except OSError:
                return time.monotonic() - started
            sent += 1
    return float("inf")


def answer_to(url: str, raw: bytes, wait: float = 10) -> tuple[bytes, float]:
    """The first bytes the server answers ``raw`` with, and how long that took."""
    with connect(url) as connection:
        started = time.monotonic()
        connection.sendall(raw)
        connection.settimeout(wait)
        try:
            return connection.recv(4096), time.monotonic() - started
        except TimeoutError:
            return b"", float("inf")


def test_silent_and_trickling_connections_are_closed_while_a_normal_client_is_served(strict_url: str) -> None:
    head = b"GET /api/feature-flags HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    durations: dict[str, list[float]] = {"silent": [], "trickling": []}
    lock = threading.Lock()

    def hold(kind: str) -> None:
        with connect(strict_url) as connection:
            took = closed_after(connection, head if kind == "trickling" else b"")
        with lock:
            durations[kind].append(took)

    holders = [threading.Thread(target=hold, args=(kind,)) for kind in ("silent", "trickling") for _ in range(40)]
    for thread in holders:
        thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    normal = httpx.get(f"{strict_url}/api/feature-flags", timeout=5)
    served_in = time.monotonic() - started
    for thread in holders:
        thread.join(40)
    late = [took for took in durations["silent"] + durations["trickling"] if took > DEADLINE_S + SLACK_S]
    closed = len(durations["silent"]) + len(durations["trickling"])
    record("connections", "40 silent and 40 trickling connections", tried=80, bad=len(late) + 80 - closed)
    assert normal.status_code == 401 and served_in < DEADLINE_S  # answered while 80 sockets were held
    assert len(durations["silent"]) == len(durations["trickling"]) == 40
    assert late == [], sorted(durations["trickling"])[-5:]
    assert min(durations["trickling"]) >= DEADLINE_S * 0.9  # they were closed by the deadline, not at once


def test_an_idle_keep_alive_connection_is_closed_after_its_response(strict_url: str) -> None:
    with connect(strict_url) as connection:
        connection.sendall(b"GET /api/feature-flags HTTP/1.1\r\nHost: x\r\n\r\n")
        assert connection.recv(4096).startswith(b"HTTP/1.1 401")
        took = closed_after(connection, b"GET /api/feature-flags HTTP/1.1\r\n")  # the next head, trickled
    record(
        "connections",
        "a keep-alive connection trickling its next request",
        tried=1,
        bad=int(took > DEADLINE_S + SLACK_S),
    )
    assert took <= DEADLINE_S + SLACK_S


@pytest.mark.parametrize(
    ("case", "raw", "status"),
    [
        ("a chunk size announced and never sent",
         b"PUT /api/admin/flags HTTP/1.1\r\nHost: x\r\n" + CHUNKED + b"ffffffffffffffff\r\nab", b"408"),
        ("a body shorter than its Content-Length",
         b"PUT /api/admin/flags HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"key\"", b"408"),
        ("a chunk header that does not parse",
         b"PUT /api/admin/flags HTTP/1.1\r\nHost: x\r\n" + CHUNKED + b"zz\r\nab\r\n", b"400"),
        ("a chunk size of 40 hex digits",
         b"PUT /api/admin/flags HTTP/1.1\r\nHost: x\r\n" + CHUNKED + b"f" * 40 + b"\r\n", b"400"),
        ("a 20 KB header", b"GET /api/feed HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * 20_000 + b"\r\n\r\n", b"431"),
        ("a request line that is not HTTP", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"),
    ],
)  # fmt: skip
def test_malformed_and_stalled_bodies_are_answered_promptly(
    strict_url: str, case: str, raw: bytes, status: bytes
) -> None:
    answer, took = answer_to(strict_url, raw)
    wrong = not answer.startswith(b"HTTP/1.1 " + status) or took > DEADLINE_S + SLACK_S
    record("connections", case, tried=1, bad=int(wrong))
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert took <= DEADLINE_S + SLACK_S
