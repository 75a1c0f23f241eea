"""Delivering a new alert by its rule's channel, and logging every attempt in ``delivery_logs``.

- ``in-app``: the ``alert_history`` row is the delivery (the notification stream sends it).
- ``webhook`` (unless the tenant's ``alertWebhooks`` flag is off): ``POST`` of the alert as
  JSON to the rule's endpoint with ``X-Ermis-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`` and
  ``X-Ermis-Timestamp``, keyed by the tenant's webhook signing key (created on first use,
  kept in ``platform_state``), so the receiver can verify origin and freshness. A 2xx is
  ``delivered``; anything else is ``failed`` with the response code (0 when there was no
  answer within ``ERMIS_WEBHOOK_TIMEOUT_S``, default 5 s). Never raises.
- ``email``: through ``email_sender`` when one is configured. None is by default, and then the
  attempt is logged ``failed`` with code 0 and the detail ``no email sender configured`` —
  never as delivered.

A failure's reason, in words, goes in the log's ``detail``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from lib.db.pool import connection
from lib.db.state_store import get_state, set_state
from lib.egress.destinations import redact_url
from lib.lazy_imports import lazy_import
from lib.platform.flags import is_feature_enabled
from lib.runtime.invocation import invocation_memo
from lib.settings import get_settings

if TYPE_CHECKING:
    from lib.platform.alerts.rules import AlertRule

egress_client = lazy_import("lib.egress.client")

DELIVERY_ID_HEADER = "X-Ermis-Delivery-Id"
SIGNATURE_HEADER = "X-Ermis-Signature"
TIMESTAMP_HEADER = "X-Ermis-Timestamp"


class EmailSender(Protocol):
    async def send(self, tenant_scope_id: str, alert: dict[str, Any]) -> None: ...


# Set by the deployment that has a mail provider; None: email alerts are logged as undelivered.
email_sender: EmailSender | None = None
NO_EMAIL_SENDER = "no email sender configured"


def webhook_key_name(tenant_scope_id: str) -> str:
    return f"platform:alerts-webhook-secret:{tenant_scope_id}"


async def webhook_signing_key(tenant_scope_id: str) -> str:
    memo = invocation_memo()
    memo_key = ("webhook-signing-key", tenant_scope_id)
    if memo is not None and memo_key in memo:
        return memo[memo_key]
    key = await get_state(webhook_key_name(tenant_scope_id))
    if not (isinstance(key, str) and key):
        key = secrets.token_hex(32)
        await set_state(webhook_key_name(tenant_scope_id), key)
    if memo is not None:
        memo[memo_key] = key
    return key


def sign_webhook(key: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(key.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


async def _post_webhook(endpoint: str, key: str, alert: dict[str, Any]) -> tuple[int, str | None]:
    """One attempt: ``(response code, None)``, or ``(0, why)`` when there was no answer. The
    whole attempt — resolution, connection, request, response head — is bounded by
    ``ERMIS_WEBHOOK_TIMEOUT_S``; the body is never read (the code is all a delivery needs), and
    redirects are not followed (a 3xx is the receiver's answer)."""
    body = json.dumps(alert, separators=(",", ":"), default=str).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        DELIVERY_ID_HEADER: alert["id"],
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: sign_webhook(key, timestamp, body),
    }
    timeout_s = get_settings().ermis_webhook_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            async with (
                egress_client.GuardedSession(timeout_s=timeout_s) as session,
                session.open("POST", endpoint, content=body, headers=headers) as response,
            ):
                code = response.status_code
        return code, ("webhooks follow no redirect" if 300 <= code < 400 else None)
    except Exception as error:  # noqa: BLE001 - every failure of the attempt is logged, none raised
        return 0, egress_client.failure_detail(error, timeout_s)


async def _log_delivery(
    tenant_scope_id: str, alert_id: str, method: str, code: int, endpoint: str | None, detail: str | None = None
) -> None:
    status = "delivered" if 200 <= code < 300 else "failed"
    async with connection() as conn:
        await conn.execute(
            "INSERT INTO delivery_logs"
            " (id, delivery_id, tenant_scope_id, method, response_code, endpoint, status, detail)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (str(uuid.uuid4()), alert_id, tenant_scope_id, method, code, endpoint, status, detail),
        )


async def deliver_alert(tenant_scope_id: str, rule: AlertRule, alert: dict[str, Any]) -> None:
    if rule.channel == "webhook":
        if not await is_feature_enabled("alertWebhooks", tenant_scope_id):
            return
        if not rule.endpoint:
            await _log_delivery(tenant_scope_id, alert["id"], "webhook", 0, None, "the rule has no endpoint")
            return
        key = await webhook_signing_key(tenant_scope_id)
        code, detail = await _post_webhook(rule.endpoint, key, alert)
        await _log_delivery(tenant_scope_id, alert["id"], "webhook", code, redact_url(rule.endpoint), detail)
    elif rule.channel == "email":
        if email_sender is None:
            await _log_delivery(tenant_scope_id, alert["id"], "email", 0, None, NO_EMAIL_SENDER)
            return
        await email_sender.send(tenant_scope_id, alert)
        await _log_delivery(tenant_scope_id, alert["id"], "email", 200, None)
