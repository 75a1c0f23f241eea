"""Paths, methods and static files, over a raw socket (no client library normalising the target):
encoded NUL and traversal, hidden files, over-long paths and any method on a static file get a
4xx JSON answer that names no file, holds no stack frame and no secret — never a 5xx."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

from lib.local.paths import PROJECT_ROOT
from lib.settings import get_settings
from tests.support.security import record

pytestmark = pytest.mark.security

HOSTILE_TARGETS = [
    "/admin/index.html%00.js",
    "/admin/..%00/README.md",
    "/admin/..%2f..%2f.venv/pyvenv.cfg",
    "/admin/..%2F..%2FREADME.md",
    "/%2e%2e/README.md",
    "/admin/%2e%2e/%2e%2e/lib/settings.py",
    "/..%5c..%5cREADME.md",
    "/admin/..\\..\\README.md",
    "/.env",
    "/.git/config",
    "/admin/.%2e/.%2e/pytest.ini",
    "/%ff%fe",
    "/" + "a" * 8192,
    "/admin/" + "b/" * 3000,
    "/api/stories/" + "c" * 8192,
    "/api/feed?" + "d=1&" * 3000,
]
HOSTILE_HEADERS = [
    b"Cookie: __session=\xff\xfe\x80\r\n",
    b"Cookie: __session=" + b"A" * 12_000 + b"\r\n",
    b"Cookie: __session=a.b.c; __session=d.e.f; =; ;;\r\n",
    b'Cookie: __session="\\"\r\n',
    b"Authorization: Bearer \xff\xfe.\x80.\x81\r\n",
    b"Authorization: Bearer " + b"e" * 12_000 + b"\r\n",
    b"Authorization: Basic Og==\r\n",
    b"Last-Event-ID: \xff\xfe\r\n",
    b"Last-Event-ID: " + b"9" * 4000 + b"\r\n",
    b"Origin: \xff\r\n",
    b"Content-Type: application/json; charset=\xff\r\n",
    b"X-Forwarded-Host: \xff\r\n",
]
FILE_METHODS = ["PUT", "DELETE", "POST", "PATCH", "PROPFIND", "MKCOL", "FROBNICATE", "OPTIONS"]
STATIC_FILES = ["/admin/index.html", "/admin/", "/realtime-demo.html", "/ermis-realtime.js"]


def raw_request(
    url: str, method: str, target: str, body: bytes = b"", extra_head: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request as written, and the answer as read."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as connection:
        head = f"{method} {target} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Length: {len(body)}\r\n"
        connection.sendall(head.encode("latin-1") + extra_head + b"Connection: close\r\n\r\n" + body)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head_bytes, _, content = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, content


def json_error_code(content: bytes) -> str | None:
    try:
        return json.loads(content)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def leaks(content: bytes) -> list[str]:
    """What a body must never hold: a file path of this machine, a stack frame, a secret."""
    text = content.decode("utf-8", "replace")
    secrets = [value for value in get_settings().secret_values() if len(value) >= 8]
    found = [marker for marker in (str(PROJECT_ROOT), "Traceback", 'File "', ".venv", "pyvenv") if marker in text]
    return found + ["a secret" for secret in secrets if secret in text]


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_hostile_targets_get_a_4xx_that_names_nothing(served_url: str, method: str) -> None:
    wrong = []
    for target in HOSTILE_TARGETS:
        status, _, content = raw_request(served_url, method, target)
        is_json_error = method == "HEAD" or json_error_code(content) is not None
        if not (400 <= status < 500 and is_json_error) or leaks(content):
            wrong.append((target[:60], status, content[:200]))
    record("targets", f"encoded NUL, traversal, hidden and over-long targets ({method})",
           tried=len(HOSTILE_TARGETS), bad=len(wrong))  # fmt: skip
    assert wrong == []


def test_malformed_headers_and_cookies_get_a_4xx_or_their_answer(served_url: str) -> None:
    routes = ["/api/feed", "/api/notifications/events?lastEventId=%ff", "/api/stories/s/events", "/admin/"]
    wrong = []
    for path in routes:
        for header in HOSTILE_HEADERS:
            method = "PUT" if path == "/admin/" else "GET"
            status, _, content = raw_request(served_url, method, path, b"{}", header)
            if status >= 500 or leaks(content):
                wrong.append((path, header[:40], status))
    record("targets", "malformed cookies, tokens, Last-Event-ID, Origin and Content-Type headers",
           tried=len(routes) * len(HOSTILE_HEADERS), bad=len(wrong))  # fmt: skip
    assert wrong == []


def test_a_static_file_is_only_read(served_url: str) -> None:
    wrong = []
    for path in STATIC_FILES:
        for method in ("GET", "HEAD"):
            if raw_request(served_url, method, path)[0] != 200:
                wrong.append((method, path, "not served"))
        for method in FILE_METHODS:
            status, headers, content = raw_request(served_url, method, path, b"<html>overwritten</html>")
            if (status, headers.get("allow")) != (405, "GET, HEAD") or leaks(content):
                wrong.append((method, path, status))
    record("targets", "every other method on the static files", tried=len(STATIC_FILES) * (len(FILE_METHODS) + 2),
           bad=len(wrong))  # fmt: skip
    assert wrong == []
    assert b"overwritten" not in (PROJECT_ROOT / "public" / "realtime-demo.html").read_bytes()
