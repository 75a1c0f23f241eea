"""AWS Lambda adapter: any function's ``app`` behind Mangum.

Vercel loads ``app`` from each ``api/`` file; the same app can run on AWS Lambda (API Gateway
HTTP API v2, REST v1, ALB or a function URL) through ``lambda_handler_for(app)``. It is named
so on purpose: an ``api/`` file must never bind ``handler``, which Vercel's builder would take
for a ``BaseHTTPRequestHandler``.
"""

from __future__ import annotations

from mangum import Mangum
from starlette.types import ASGIApp


def lambda_handler_for(app: ASGIApp) -> Mangum:
    return Mangum(app, lifespan="off")
