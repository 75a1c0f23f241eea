"""Delivering a new alert by its rule's channel.

- ``in-app``: the ``alert_history`` row is the delivery (the notification stream sends it).
- ``webhook`` (unless the tenant's ``alertWebhooks`` flag is off): a delivery that is retried
  until delivered or dead (``webhooks``: the signed POST, the schedule, the circuit); a rule
  without an endpoint is logged ``failed`` at once.
- ``email``: through ``email_sender`` when one is configured. None is by default, and then the
  attempt is logged ``failed`` with code 0 and the detail ``no email sender configured`` —
  never as delivered.

Every attempt is a row of the delivery log (``delivery_log``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from lib.db.pool import connection
from lib.platform.alerts.delivery_log import log_attempt
from lib.platform.alerts.webhooks import start_delivery
from lib.platform.flags import is_feature_enabled

if TYPE_CHECKING:
    from lib.platform.alerts.rules import AlertRule


class EmailSender(Protocol):
    async def send(self, tenant_scope_id: str, alert: dict[str, Any]) -> None: ...


# Set by the deployment that has a mail provider; None: email alerts are logged as undelivered.
email_sender: EmailSender | None = None
NO_EMAIL_SENDER = "no email sender configured"


async def _log(tenant_scope_id: str, alert_id: str, method: str, code: int, detail: str | None = None) -> None:
    async with connection() as conn:
        await log_attempt(conn, tenant_scope_id, alert_id, method, code, None, detail)


async def deliver_alert(tenant_scope_id: str, rule: AlertRule, alert: dict[str, Any]) -> None:
    if rule.channel == "webhook":
        if not await is_feature_enabled("alertWebhooks", tenant_scope_id):
            return
        if not rule.endpoint:
            await _log(tenant_scope_id, alert["id"], "webhook", 0, "the rule has no endpoint")
            return
        await start_delivery(tenant_scope_id, rule.id, rule.endpoint, alert)
    elif rule.channel == "email":
        if email_sender is None:
            await _log(tenant_scope_id, alert["id"], "email", 0, NO_EMAIL_SENDER)
            return
        await email_sender.send(tenant_scope_id, alert)
        await _log(tenant_scope_id, alert["id"], "email", 200)
