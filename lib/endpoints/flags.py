"""HTTP for the flag store: the operator's ``GET/PUT /api/admin/flags`` (surface ``flags``)
and the caller's tenant-resolved ``GET /api/feature-flags`` (any session).

``PUT`` takes ``{"key", "enabled"?, "tenantScopeId"?, "clearOverride"?}``: exactly one of
``enabled`` (a boolean) and ``clearOverride: true``; an unknown key, a wrong type, an unknown
field, both/neither, or a ``tenantScopeId`` outside the tenant grammar (``lib.auth.tenants``;
stored canonical) is a 400 naming the problem; a body not declared JSON is a 415. Each change is
written to the operators' audit log.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.http.bodies import json_body
from lib.lazy_imports import lazy_import
from lib.platform.flags import (
    clear_feature_flag,
    list_feature_flags,
    resolve_feature_flags,
    set_feature_flag,
)
from lib.platform.ops_audit import record_operator_action

request_bodies = lazy_import("lib.endpoints.request_bodies")


async def read_flags(_request: Request) -> Response:
    return JSONResponse({"flags": await list_feature_flags()})


async def update_flag(request: Request) -> Response:
    update = await json_body(request, request_bodies.FlagUpdate, "invalid_flag_update")
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
