"""The read side of the operations console (surface ``queues``):

- ``GET /api/admin/crons`` → ``{"jobs": [{"name", "path", "schedule", "stale", "lastSuccessAt",
  "runs": [...]}]}``: each ``vercel.json`` cron with its last 20 runs (``lib.jobs.cron_health``);
- ``GET /api/admin/audit?limit=`` → ``{"entries": [...]}``: the operators' actions, newest first
  (``lib.platform.ops_audit``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.clock import iso_timestamp
from lib.http.bodies import int_query
from lib.jobs.cron_health import read_cron_health
from lib.platform.ops_audit import MAX_AUDIT_LIMIT, read_audit_log

DEFAULT_AUDIT_LIMIT = 50


async def read_crons(_request: Request) -> Response:
    jobs = await read_cron_health()
    return JSONResponse({"jobs": [job.as_json() for job in jobs], "measuredAt": iso_timestamp()})


async def read_audit(request: Request) -> Response:
    limit = int_query(request, "limit", DEFAULT_AUDIT_LIMIT, MAX_AUDIT_LIMIT)
    return JSONResponse({"entries": await read_audit_log(limit)})
