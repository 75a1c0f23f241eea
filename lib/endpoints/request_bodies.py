"""The JSON bodies the operator endpoints accept, as pydantic models: ``FlagUpdate`` (``PUT
/api/admin/flags``, lib.endpoints.flags) and ``DeadLetterAction`` (``POST /api/admin/dead-letters``,
lib.endpoints.dead_letters). They live apart from their handlers, which bind this module with
``lib.lazy_imports``, so a function's start and its GET requests never load pydantic.

Identifiers are checked here before SQL sees them: ``Identifier`` caps them at
``MAX_ID_LENGTH`` and refuses NUL (a JSON ``\\u0000`` escape survives the body check of
``lib.http.request_limits``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, field_validator, model_validator

from lib.auth.tenants import canonical_tenant_id
from lib.http.request_limits import MAX_ID_LENGTH
from lib.platform.flags import FLAG_DEFINITIONS

MAX_IDS = 100
MAX_REASON_CHARS = 500
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_LENGTH, pattern=r"^[^\x00]+$")]
SourceName = Literal["queue", "ledger", "metering", "webhook"]


class FlagUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    key: str
    enabled: StrictBool | None = None
    tenant_scope_id: str | None = Field(default=None, alias="tenantScopeId")
    clear_override: StrictBool = Field(default=False, alias="clearOverride")

    @field_validator("tenant_scope_id")
    @classmethod
    def canonical_tenant(cls, value: str | None) -> str | None:
        return None if value is None else canonical_tenant_id(value)

    @model_validator(mode="after")
    def one_action(self) -> FlagUpdate:
        if self.key not in FLAG_DEFINITIONS:
            raise ValueError(f"unknown flag {self.key!r}; known: {', '.join(FLAG_DEFINITIONS)}")
        if (self.enabled is None) == (not self.clear_override):
            raise ValueError("give exactly one of enabled (a boolean) and clearOverride: true")
        return self


class DeadLetterAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["redrive", "delete"]
    source: SourceName
    ids: list[Identifier] = Field(min_length=1, max_length=MAX_IDS)
    reason: str | None = Field(default=None, max_length=MAX_REASON_CHARS)

    @model_validator(mode="after")
    def delete_needs_a_reason(self) -> DeadLetterAction:
        if self.action == "delete" and not (self.reason or "").strip():
            raise ValueError("a delete needs a reason")
        return self
