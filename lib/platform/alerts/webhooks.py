"""Webhook deliveries: every alert sent by webhook reaches its receiver at least once, or ends
*dead*, listed for an operator to resend.

The model, after Stripe's and Svix's webhooks:

- A *delivery* (``webhook_deliveries``) is created with its alert and has the alert's id, which
  every attempt sends as ``X-Ermis-Delivery-Id`` — the receiver's key for doing the work once.
  It is ``pending`` until an attempt is answered 2xx (``delivered``) or it cannot succeed
  (``dead``). Its first attempt is made at once, where the alert fired, to the endpoint of the
  rule that fired it. Every retry reads the rule's endpoint anew, never a copy (the URL can be a
  credential): a fixed rule fixes the next attempt, and a removed rule (or ``alertWebhooks``
  turned off) ends the delivery dead.
- An *attempt* claims the delivery with a lease (so two wake-ups never attempt it at once; a
  process that dies mid-attempt leaves a lease that simply expires), POSTs the signed alert
  through the egress guard, and records, in one transaction, a ``delivery_logs`` row (each
  attempt is one the tenant sees; a failed one is a ``delivery.failed`` event) and the
  delivery's next state. No answer, a connection refused, 408, 429 and 5xx are retried after
  the next delay of ``ERMIS_WEBHOOK_RETRY_SCHEDULE_S`` (±10 % jitter; a 429's or 503's
  ``Retry-After`` when longer); any other answer, and a destination the guard refuses, is final.
  After the last delay the delivery is dead.
- A *circuit* per endpoint (``circuits``) pauses an endpoint that keeps failing: an attempt due
  while it is open is moved to when it closes, without being counted or sent.
- *Wake-ups* carry the schedule: a signed ``webhooks.deliver`` message sent with the delay until
  the attempt is due (at most ``MAX_WAKEUP_DELAY_S``: a message must arrive while its signature
  is fresh; one that arrives early sends the next), delivered by the queue to
  ``api/queues/webhooks/deliver.py``. The schedule itself is in Postgres, so a retry survives
  any process. Without a queue (local development with none configured), an attempt due now
  runs in-process and later ones run at the alert sweep.
- The *backstop*: every alert sweep wakes the pending deliveries overdue by more than
  ``BACKSTOP_GRACE_S`` — a wake-up lost to a failed publish.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import random
import secrets
import time
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from lib.clock import iso_timestamp
from lib.db.pool import connection
from lib.db.state_store import get_state, set_state
from lib.egress.destinations import redact_url
from lib.lazy_imports import lazy_import
from lib.observability import log_server_error
from lib.platform.alerts import circuits
from lib.platform.alerts.delivery_log import log_attempt
from lib.platform.flags import is_feature_enabled
from lib.queues.publish import MessageMetadata, publish_message
from lib.queues.topics import WEBHOOK_DELIVERY_TOPIC
from lib.queues.transport import queue_transport
from lib.runtime.invocation import invocation_memo
from lib.settings import get_settings

alert_rules = lazy_import("lib.platform.alerts.rules")
egress_client = lazy_import("lib.egress.client")
psycopg_json = lazy_import("psycopg.types.json")

DELIVERY_ID_HEADER = "X-Ermis-Delivery-Id"
SIGNATURE_HEADER = "X-Ermis-Signature"
TIMESTAMP_HEADER = "X-Ermis-Timestamp"
LEASE_S = 60  # longer than any attempt (ERMIS_WEBHOOK_TIMEOUT_S bounds it)
MAX_WAKEUP_DELAY_S = 6 * 3600  # well inside a signed message's 24 h freshness
MAX_RETRY_AFTER_S = 86_400
BACKSTOP_GRACE_S = 60
BACKSTOP_BATCH = 200
RETRIED_CODES = frozenset({0, 408, 429}) | frozenset(range(500, 600))


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


class Answer:
    """One attempt's result: the code (0: no answer), why it failed in words, whether another
    attempt could succeed, and the receiver's ``Retry-After`` in seconds."""

    def __init__(self, code: int, detail: str | None, retry: bool, retry_after_s: float | None = None) -> None:
        self.code, self.detail, self.retry, self.retry_after_s = code, detail, retry, retry_after_s

    @property
    def delivered(self) -> bool:
        return 200 <= self.code < 300


def _retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    if value.strip().isdigit():
        return min(float(value.strip()), MAX_RETRY_AFTER_S)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(0.0, (when - datetime.now(UTC)).total_seconds()), MAX_RETRY_AFTER_S)


async def post_webhook(endpoint: str, key: str, alert: dict[str, Any]) -> Answer:
    """One attempt. The whole of it — resolution, connection, request, the response's head — is
    bounded by ``ERMIS_WEBHOOK_TIMEOUT_S``; the body is never read (the code is all a delivery
    needs), and redirects are not followed (a 3xx is the receiver's answer)."""
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
                code, retry_after = response.status_code, response.headers.get("retry-after")
    except Exception as error:  # noqa: BLE001 - every failure of the attempt is recorded, none raised
        # A destination the guard refuses stays refused; anything else may answer next time.
        return Answer(0, egress_client.failure_detail(error, timeout_s), not egress_client.is_final(error))
    detail = "webhooks follow no redirect" if 300 <= code < 400 else None
    honoured = _retry_after_seconds(retry_after) if code in (429, 503) else None
    return Answer(code, detail, code in RETRIED_CODES, honoured)


async def start_delivery(tenant_scope_id: str, rule_id: str, endpoint: str, alert: dict[str, Any]) -> None:
    """Record the alert's delivery (once: a repeat is a no-op) and make its first attempt now,
    here, to the endpoint of the rule that fired it; retries are woken by the queue."""
    async with connection() as conn:
        await conn.execute(
            "INSERT INTO webhook_deliveries (id, tenant_scope_id, rule_id, payload) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (id) DO NOTHING",
            (alert["id"], tenant_scope_id, rule_id, psycopg_json.Jsonb(alert)),
        )
    await run_attempt(alert["id"], endpoint)


async def wake(delivery_id: str, due_at: datetime) -> None:
    """Have the delivery attempted at ``due_at``: a wake-up on the queue, or without a queue an
    attempt now when it is due (a later one is the sweep's)."""
    delay = max(0.0, (due_at - datetime.now(UTC)).total_seconds())
    if queue_transport() is None:
        if delay == 0:
            await run_attempt(delivery_id)
        return
    message = {"deliveryId": delivery_id, "dueAt": iso_timestamp(due_at), "requestedAt": iso_timestamp()}
    hop = math.ceil(min(delay, MAX_WAKEUP_DELAY_S))  # never early: a wake-up before its time only hops again
    await publish_message(
        WEBHOOK_DELIVERY_TOPIC, message, key=f"webhook:{delivery_id}:{message['dueAt']}:{hop}", delay_seconds=hop
    )


async def on_wakeup(message: dict[str, Any], _metadata: MessageMetadata) -> None:
    """The ``webhooks.deliver`` consumer's handler: attempt the delivery when it is due."""
    delivery_id, due_at = message["deliveryId"], datetime.fromisoformat(message["dueAt"])
    if due_at > datetime.now(UTC):  # a long delay, split into hops: send the next one
        await wake(delivery_id, due_at)
        return
    await run_attempt(delivery_id)


async def run_attempt(delivery_id: str, endpoint: str | None = None) -> None:
    """Attempt the delivery if it is due and nobody holds it, then wake it for its next attempt."""
    next_due = await attempt_delivery(delivery_id, endpoint)
    if next_due is not None:
        await wake(delivery_id, next_due)


_CLAIM = """
UPDATE webhook_deliveries SET lease_until = now() + make_interval(secs => %(lease)s), attempts = attempts + 1
WHERE id = %(id)s AND status = 'pending' AND next_attempt_at <= now() + interval '1 second'
  AND (lease_until IS NULL OR lease_until < now())
RETURNING tenant_scope_id, rule_id, payload, attempts
"""


async def attempt_delivery(delivery_id: str, endpoint: str | None = None) -> datetime | None:
    """One attempt of a due, unheld delivery, to ``endpoint`` or else its rule's endpoint now;
    returns when the next is due (``None``: no next attempt, or not this caller's to schedule)."""
    async with connection() as conn:
        claimed = await (await conn.execute(_CLAIM, {"id": delivery_id, "lease": LEASE_S})).fetchone()
    if claimed is None:
        return None
    tenant, attempt = claimed["tenant_scope_id"], claimed["attempts"]
    try:
        endpoint = endpoint or await _endpoint(tenant, claimed["rule_id"])
        if endpoint is None:
            return await _finish(delivery_id, tenant, attempt, None, Answer(0, _NO_ENDPOINT, retry=False))
        digest = circuits.endpoint_digest(endpoint)
        paused_until = await circuits.paused_until(digest)
        if paused_until is not None:
            return await _postpone(delivery_id, paused_until)
        answer = await post_webhook(endpoint, await webhook_signing_key(tenant), claimed["payload"])
        await circuits.record(digest, succeeded=answer.delivered, counts=answer.delivered or answer.retry)
        return await _finish(delivery_id, tenant, attempt, endpoint, answer)
    except BaseException:
        await _release(delivery_id)
        raise


_NO_ENDPOINT = "the rule no longer sends this alert by webhook, or webhooks are off for the tenant"


async def _endpoint(tenant: str, rule_id: str) -> str | None:
    """The rule's endpoint now, or ``None`` when it no longer sends webhooks."""
    if not await is_feature_enabled("alertWebhooks", tenant):
        return None
    rule = next((rule for rule in await alert_rules.get_alert_rules(tenant) if rule.id == rule_id), None)
    return rule.endpoint if rule is not None and rule.channel == "webhook" and rule.endpoint else None


def next_delay_s(attempt: int, answer: Answer) -> float | None:
    """The wait before attempt ``attempt + 1``, or ``None`` when there is none."""
    schedule = get_settings().ermis_webhook_retry_schedule_s
    if answer.delivered or not answer.retry or attempt > len(schedule):
        return None
    delay = schedule[attempt - 1] * random.uniform(0.9, 1.1)  # noqa: S311 - jitter, not a secret
    return max(delay, answer.retry_after_s or 0.0)


async def _finish(delivery_id: str, tenant: str, attempt: int, endpoint: str | None, answer: Answer) -> datetime | None:
    """Log the attempt and move the delivery on, in one transaction."""
    delay = next_delay_s(attempt, answer)
    status = "delivered" if answer.delivered else ("pending" if delay is not None else "dead")
    next_due = datetime.now(UTC) + timedelta(seconds=delay) if delay is not None else None
    async with connection() as conn, conn.transaction():
        await log_attempt(conn, tenant, delivery_id, "webhook", answer.code, redact_url(endpoint), answer.detail)
        await conn.execute(
            "UPDATE webhook_deliveries SET status = %s, lease_until = NULL, last_code = %s, last_detail = %s,"
            " next_attempt_at = COALESCE(%s, next_attempt_at),"
            " finished_at = CASE WHEN %s = 'pending' THEN NULL ELSE now() END WHERE id = %s",
            (status, answer.code, answer.detail, next_due, status, delivery_id),
        )
    return next_due


async def _postpone(delivery_id: str, until: datetime) -> datetime:
    """The endpoint's circuit is open: the attempt waits for it, uncounted."""
    due = until + timedelta(seconds=random.uniform(0, 1))  # noqa: S311 - spread the deliveries that waited
    async with connection() as conn:
        await conn.execute(
            "UPDATE webhook_deliveries SET attempts = attempts - 1, lease_until = NULL, next_attempt_at = %s"
            " WHERE id = %s",
            (due, delivery_id),
        )
    return due


async def _release(delivery_id: str) -> None:
    # If the database is down too, the lease expires and the backstop or the queue retries.
    try:
        async with connection() as conn:
            await conn.execute(
                "UPDATE webhook_deliveries SET attempts = attempts - 1, lease_until = NULL WHERE id = %s",
                (delivery_id,),
            )
    except Exception as error:  # noqa: BLE001 - the attempt's own error is the one to report
        log_server_error("alerts:webhooks", error, deliveryId=delivery_id)


async def wake_overdue_deliveries() -> int:
    """The backstop: wake every pending delivery overdue by more than ``BACKSTOP_GRACE_S`` (with
    no queue, every due one) that nobody holds; returns how many."""
    grace = BACKSTOP_GRACE_S if queue_transport() is not None else 0
    async with connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT id, next_attempt_at FROM webhook_deliveries WHERE status = 'pending'"
                " AND next_attempt_at < now() - make_interval(secs => %s)"
                " AND (lease_until IS NULL OR lease_until < now()) ORDER BY next_attempt_at LIMIT %s",
                (grace, BACKSTOP_BATCH),
            )
        ).fetchall()
    for row in rows:
        try:
            await wake(row["id"], row["next_attempt_at"])
        except Exception as error:  # noqa: BLE001 - one delivery's wake-up failing stops no other
            log_server_error("alerts:webhooks", error, deliveryId=row["id"])
    return len(rows)


FINISHED_RETENTION_DAYS = 30


async def prune_finished_deliveries_batch(batch_size: int) -> int:
    """Delete up to ``batch_size`` deliveries delivered or discarded more than
    ``FINISHED_RETENTION_DAYS`` ago (dead ones wait for an operator), and circuits untouched as
    long; returns how many deliveries."""
    async with connection() as conn:
        row = await (
            await conn.execute(
                "WITH doomed AS (SELECT id FROM webhook_deliveries WHERE status IN ('delivered', 'discarded')"
                " AND finished_at < now() - make_interval(days => %(days)s) LIMIT %(limit)s),"
                " circuits AS (DELETE FROM webhook_circuits WHERE endpoint_digest IN (SELECT endpoint_digest"
                " FROM webhook_circuits WHERE updated_at < now() - make_interval(days => %(days)s) LIMIT %(limit)s))"
                " DELETE FROM webhook_deliveries d USING doomed WHERE d.id = doomed.id RETURNING d.id",
                {"days": FINISHED_RETENTION_DAYS, "limit": batch_size},
            )
        ).fetchall()
    return len(row)
