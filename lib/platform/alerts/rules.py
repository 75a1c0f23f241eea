"""Alert rules: a JSON list per tenant in ``platform_state`` under
``platform:alerts-rules:<tenantScopeId>`` (CONTRACTS §6). A rule matches a story when any
keyword occurs, case-insensitively, in its headline or summary. A stored rule that does not
validate is skipped (and reported by its id and the fields at fault, never its values: an
endpoint can be a credential), never fatal to the tenant's other rules.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lib.db.state_store import get_state
from lib.observability import log_server_error

ALERT_RULES_PREFIX = "platform:alerts-rules:"


class AlertRule(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(min_length=1)
    keywords: list[str] = Field(min_length=1)
    severity: Literal["info", "warning", "critical"] = "info"
    channel: Literal["in-app", "email", "webhook"] = "in-app"
    endpoint: str | None = None

    def matches(self, story: dict[str, Any]) -> bool:
        text = f"{story.get('headline') or ''}\n{story.get('summary') or ''}".casefold()
        return any(keyword.strip() and keyword.strip().casefold() in text for keyword in self.keywords)


def rules_key(tenant_scope_id: str) -> str:
    return f"{ALERT_RULES_PREFIX}{tenant_scope_id}"


async def get_alert_rules(tenant_scope_id: str) -> list[AlertRule]:
    stored = await get_state(rules_key(tenant_scope_id))
    rules: list[AlertRule] = []
    for raw in stored if isinstance(stored, list) else []:
        try:
            rules.append(AlertRule.model_validate(raw))
        except ValidationError as invalid:
            # Which fields are wrong, never their values: a rule's endpoint can be a credential.
            faults = sorted({".".join(map(str, error["loc"])) or "rule" for error in invalid.errors()})
            rule_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
            log_server_error(
                "alerts", f"invalid alert rule for {tenant_scope_id}", ruleId=(rule_id or "")[:100], fields=faults
            )
    return rules
