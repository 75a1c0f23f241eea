"""HTTP for the flag store: the operator's ``GET/PUT /api/admin/flags`` (surface ``flags``)
and the caller's tenant-resolved ``GET /api/feature-flags`` (any session).

``PUT`` takes ``{"key", "enabled"?, "tenantScopeId"?, "clearOverride"?}``: exactly one of
``enabled`` (a boolean) and ``clearOverride: true``; an unknown key, a wrong type, an unknown
field, both/neither, or a ``tenantScopeId`` outside the tenant grammar (``lib.auth.tenants``;
stored canonical) is a 400 naming the problem; a body not declared JSON is a 415. Each change is
written to the operators' audit log.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.auth.tenants import canonical_tenant_id
from lib.http.bodies import json_body
from lib.platform.flags import (
    FLAG_DEFINITIONS,
    clear_feature_flag,
    list_feature_flags,
    resolve_feature_flags,
    set_feature_flag,
)
from lib.platform.ops_audit import record_operator_action


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


async def read_flags(_request: Request) -> Response:
    return JSONResponse({"flags": await list_feature_flags()})


async def update_flag(request: Request) -> Response:
    update = await json_body(request, FlagUpdate, "invalid_flag_update")
    if update.clear_override:
        await clear_feature_flag(update.key, update.tenant_scope_id)
        action, outcome = "flag.clear", {"tenantScopeId": update.tenant_scope_id}
    else:
        await set_feature_flag(update.key, bool(update.enabled), update.tenant_scope_id)
        action, outcome = "flag.set", {"enabled": update.enabled, "tenantScopeId": update.tenant_scope_id}
    await record_operator_action(require_session(request).user_id, action, "flags", [update.key], None, outcome)
    return JSONResponse({"flags": await list_feature_flags()})


async def read_my_flags(request: Request) -> Response:
    session = require_session(request)
    return JSONResponse({"flags": await resolve_feature_flags(session.tenant_scope_id)})
