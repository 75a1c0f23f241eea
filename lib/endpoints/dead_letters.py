"""``GET/POST /api/admin/dead-letters`` (surface ``queues``): every source of stuck work behind
one list, and the operator's actions on it (``lib.platform.stuck_work``).

``GET ?source=queue|ledger|metering|webhook&limit=&cursor=`` answers ``{"entries": [{"source",
"id", "failedAt", "attempts", "error", "payload"}], "nextCursor", "unavailable"}``, newest first.
Without ``source`` all are merged by ``failedAt``; the cursor (opaque) carries each source's own
keyset position, so paging through the merge skips and repeats nothing. A source that cannot be
read right now (Redis not configured) is named in ``unavailable`` instead of failing the list.

``POST {"action": "redrive"|"delete", "source", "ids": [...], "reason"?}`` (``reason`` required
to delete; JSON only) acts on each id at most once and answers ``{"action",
"source", "results": [{"id", "outcome", "detail"?}], "auditId"}``; the action is written to the
audit log with the session's ``sub``.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.auth.gates import require_session
from lib.http.bodies import int_query, json_body
from lib.http.errors import ApiError
from lib.lazy_imports import lazy_import
from lib.platform.ai_ledger_retry import LedgerDeadLetters, RedisNotConfigured
from lib.platform.alerts.dead_deliveries import WebhookDeadDeliveries
from lib.platform.metering_dead_letters import MeteringDeadLetters
from lib.platform.ops_audit import record_operator_action
from lib.platform.stuck_work import Position, StuckEntry, StuckWorkSource
from lib.queues.dead_letters import QueueDeadLetters

request_bodies = lazy_import("lib.endpoints.request_bodies")

SOURCES: dict[str, StuckWorkSource] = {
    source.name: source
    for source in (QueueDeadLetters(), LedgerDeadLetters(), MeteringDeadLetters(), WebhookDeadDeliveries())
}
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
# A source's place in the merged list: not started (None), after a position, or exhausted (False).
Cursor = dict[str, Position | Literal[False] | None]


def _encode_cursor(cursor: Cursor) -> str:
    plain = {
        name: [position[0].isoformat(), position[1]] if position else position for name, position in cursor.items()
    }
    return base64.urlsafe_b64encode(json.dumps(plain).encode()).decode().rstrip("=")


def _decode_cursor(text: str, names: list[str]) -> Cursor:
    try:
        plain = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        cursor: Cursor = {}
        for name in names:
            value = plain[name]
            if value is None or value is False:
                cursor[name] = value
            else:
                at, entry_id = value
                cursor[name] = (datetime.fromisoformat(at), str(entry_id))
        return cursor
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise ApiError(400, "invalid_cursor", "cursor is not one this list gave out.") from None


def _selected_sources(request: Request) -> list[str]:
    source = request.query_params.get("source")
    if source is None:
        return list(SOURCES)
    if source not in SOURCES:
        raise ApiError(400, "invalid_source", f"source must be one of {', '.join(SOURCES)}.")
    return [source]


async def list_dead_letters(request: Request) -> Response:
    names = _selected_sources(request)
    limit = int_query(request, "limit", DEFAULT_LIMIT, MAX_LIMIT)
    raw_cursor = request.query_params.get("cursor")
    cursor: Cursor = _decode_cursor(raw_cursor, names) if raw_cursor else dict.fromkeys(names)
    fetched: dict[str, list[StuckEntry]] = {}
    unavailable: dict[str, str] = {}
    for name in names:
        position = cursor[name]
        if position is False:
            continue
        try:
            fetched[name] = await SOURCES[name].list_entries(limit + 1, position)
        except RedisNotConfigured as error:
            unavailable[name] = str(error)
    merged = sorted((entry for entries in fetched.values() for entry in entries), key=lambda e: e.position)
    page = merged[::-1][:limit]
    next_cursor: Cursor = {}
    for name in names:
        taken = [entry for entry in page if entry.source == name]
        if name not in fetched or len(fetched[name]) == len(taken):
            next_cursor[name] = False if name in fetched else cursor[name]
        else:
            next_cursor[name] = taken[-1].position if taken else cursor[name]
    more = any(position is not False for name, position in next_cursor.items() if name in fetched)
    return JSONResponse(
        {
            "entries": [entry.as_json() for entry in page],
            "nextCursor": _encode_cursor(next_cursor) if more else None,
            "unavailable": unavailable,
        }
    )


async def act_on_dead_letters(request: Request) -> Response:
    body = await json_body(request, request_bodies.DeadLetterAction, "invalid_dead_letter_action")
    actor = require_session(request).user_id
    ids = list(dict.fromkeys(body.ids))
    source = SOURCES[body.source]
    try:
        if body.action == "redrive":
            results = await source.redrive(ids, actor)
        else:
            results = await source.delete(ids, actor)
    except RedisNotConfigured as error:
        raise ApiError(503, "source_unavailable", f"{body.source}: {error}") from None
    outcome: list[dict[str, Any]] = [result.as_json() for result in results]
    audit_id = await record_operator_action(actor, body.action, body.source, ids, body.reason, outcome)
    return JSONResponse({"action": body.action, "source": body.source, "results": outcome, "auditId": audit_id})
