"""An ``api/`` function's ``app`` on AWS Lambda, behind Mangum.

Vercel loads ``app`` from each ``api/`` file; on Lambda the same app answers API Gateway HTTP
API v2 (and REST v1, ALB or function URL) events through ``lambda_handler_for(app)``. A route
``/api/stories/{storyId}/events`` arrives with its concrete path in ``rawPath``, which the app's
own routing reads, exactly as on Vercel. It is named so on purpose: an ``api/`` file must never
bind ``handler``, which Vercel's builder would take for a ``BaseHTTPRequestHandler``.

Lambda buffers a Python function's response, so the SSE streams cannot stream here: on AWS they
are served by the container process (``scripts/serve``), or browsers fall back to the REST
polling routes (README, "Deploying to AWS").
"""

from __future__ import annotations

from mangum import Mangum
from starlette.types import ASGIApp


def lambda_handler_for(app: ASGIApp) -> Mangum:
    return Mangum(app, lifespan="off")
