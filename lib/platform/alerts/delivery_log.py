"""The delivery log (``delivery_logs``): one row per attempt to deliver an alert, by any
channel — what the tenant sees (a failed row is a ``delivery.failed`` event). ``code`` is the
receiver's answer (0: none); ``detail`` says in words why an attempt failed; ``endpoint`` is
only ever the shown form of a URL (``scheme://host/…``, ``lib.egress.destinations.redact_url``).
"""

from __future__ import annotations

import uuid
from typing import Any


async def log_attempt(
    conn: Any, tenant: str, delivery_id: str, method: str, code: int, endpoint: str | None, detail: str | None
) -> None:
    status = "delivered" if 200 <= code < 300 else "failed"
    await conn.execute(
        "INSERT INTO delivery_logs"
        " (id, delivery_id, tenant_scope_id, method, response_code, endpoint, status, detail)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (str(uuid.uuid4()), delivery_id, tenant, method, code, endpoint or None, status, detail),
    )
