"""lib.local.services: a service that cannot start is one clear line, not a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lib.local.services import EmbeddedPostgres, EmbeddedRedis, ServiceStartError, ensure_port_free


def test_postgres_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data directory's parent should be")
    with pytest.raises(ServiceStartError) as failure:
        EmbeddedPostgres(blocker / "postgres").start()
    assert str(failure.value).startswith("embedded Postgres could not start in ")
    assert "\n" not in str(failure.value)


def test_redis_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(ServiceStartError) as failure:
        EmbeddedRedis(blocker / "redis").start()
    assert str(failure.value).startswith("embedded Redis could not start in ")
    assert "\n" not in str(failure.value)


def test_taken_port_is_reported() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ServiceStartError, match=f"port {port} on 127.0.0.1 is already in use"):
            ensure_port_free("127.0.0.1", port)
