"""Load an ``api/`` function's ``app`` the way the dev server does, and talk to it in-process;
``OPEN``, the gate of the small apps tests build themselves, admits every request."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.types import ASGIApp

from lib.auth.gates import Gate
from lib.bundle import PROJECT_ROOT
from lib.runtime.functions import load_function_app


async def _admit_all(_request: Request) -> None:
    return None


OPEN = Gate("test-open", _admit_all)


def load_api_app(relative_file: str) -> ASGIApp:
    return load_function_app(PROJECT_ROOT, relative_file)


def client_for(app: ASGIApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://function.test")
