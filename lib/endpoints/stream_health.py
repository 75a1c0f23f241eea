"""``GET /api/admin/streams`` (surface ``queues``): the streams' change path, as the operations
console shows it (``lib.streams``):

- ``bus``: how changes reach the stream processes — ``redis`` (``REDIS_URL``), ``in-process``
  (no Redis: one process), or ``null`` (only Upstash's REST URL: streams poll);
- ``detector``: the process holding the detector's lease (and its tag, as streams' ``X-Ermis-Process``
  headers show it) and since when (``null``: none now —
  no stream is open anywhere, or the lease is being taken over);
- ``lastPosition``: the last position drawn;
- ``lag``: committed rows still without a position, and the oldest one's age in seconds — what
  streams are waiting for; a growing lag with no detector is the thing to page on;
- ``subscribedProcesses``: processes subscribed to the bus (Redis's own count);
- ``openStreamsByTenant``: streams open per tenant, from their leases (``lib.streams.limits``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from lib.clock import iso_timestamp
from lib.runtime.process import process_tag
from lib.streams.bus import change_bus
from lib.streams.limits import open_streams_by_tenant
from lib.streams.positioner import position_lag


async def read_stream_health(_request: Request) -> Response:
    bus = await change_bus()
    leader = await bus.leader() if bus is not None else None
    lag = await position_lag()
    body = {
        "bus": None if bus is None else bus.name,
        "detector": None
        if leader is None
        else {
            "process": str(leader.get("process")),
            "tag": process_tag(str(leader.get("process"))),
            "since": iso_timestamp(datetime.fromtimestamp(float(leader.get("since", 0)), UTC)),
        },
        "lastPosition": lag.last_position,
        "lag": {
            "unpositioned": lag.unpositioned,
            "oldestAgeS": None if lag.oldest_age_s is None else round(lag.oldest_age_s, 3),
        },
        "subscribedProcesses": 0 if bus is None else await bus.subscribers(),
        "openStreamsByTenant": await open_streams_by_tenant(),
        "measuredAt": iso_timestamp(),
    }
    return JSONResponse(body)
