"""This process as the fleet names it.

- ``PROCESS`` — ``<host>/<pid>/<random>``, for operators: who holds the change detector's lease
  (``lib.streams.bus``), shown on the operations console. The random part tells apart two
  processes that reuse a pid on one host (a restarted container).
- ``PROCESS_TAG`` — eight hex digits of ``PROCESS``'s digest, for browsers: a stream response's
  ``X-Ermis-Process`` header says which process served it (the realtime demo shows it), without
  naming the host.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket

PROCESS = f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


def process_tag(process: str) -> str:
    """The tag of a process's name (this one's, or the detector's read from its lease)."""
    return hashlib.sha256(process.encode()).hexdigest()[:8]


PROCESS_TAG = process_tag(PROCESS)
