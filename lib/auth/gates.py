"""Gates: the checks a request passes before a handler runs.

A ``Gate`` has a label (what the auth-guard test recognises) and an ``admit`` coroutine that
raises ``ApiError`` (401 or 403, JSON) or returns, leaving the verified ``Session`` on
``request.state.session`` when there is one. Routes attach one gate per method through
``lib.http.routing.route``, so every endpoint declares how it is protected.

- ``CRON_BEARER``: the platform's cron request (``CRON_SECRET``).
- ``SESSION``: any signed-in user.
- ``surface(name)``: a platform operator whose role opens that surface.
- ``capability(name)``: a tenant role (or bypass) holding that capability.
- ``QUEUE_MESSAGE_HMAC``: a queue push delivery; its HMAC is verified by the consumer wrapper,
  which must acknowledge (not reject) a forged message so the queue never retries it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request

from lib.auth.cron import is_authorized_cron_request
from lib.auth.roles import CAPABILITY_ORG_ROLES, SURFACE_ROLES, capability_allows, surface_allows
from lib.auth.sessions import Session, SessionError, session_from_request
from lib.http.errors import ApiError


@dataclass(frozen=True)
class Gate:
    label: str
    admit: Callable[[Request], Awaitable[None]]


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def require_session(request: Request) -> Session:
    """The verified session of this request (cached on ``request.state``) or a 401."""
    cached = getattr(request.state, "session", None)
    if isinstance(cached, Session):
        return cached
    try:
        session = session_from_request(request)
    except SessionError as error:
        raise unauthorized(str(error)) from None
    request.state.session = session
    return session


async def _admit_cron(request: Request) -> None:
    if not is_authorized_cron_request(request):
        raise unauthorized("A valid cron bearer is required.")


async def _admit_session(request: Request) -> None:
    require_session(request)


async def _admit_queue_delivery(request: Request) -> None:
    return None


CRON_BEARER = Gate("cron", _admit_cron)
SESSION = Gate("session", _admit_session)
QUEUE_MESSAGE_HMAC = Gate("message-hmac", _admit_queue_delivery)


def surface(name: str) -> Gate:
    if name not in SURFACE_ROLES:
        raise ValueError(f"unknown surface {name!r}")

    async def admit(request: Request) -> None:
        session = require_session(request)
        if not surface_allows(name, session.platform_role):
            raise forbidden(f"This operation needs access to the {name!r} surface.")

    return Gate(f"surface:{name}", admit)


def capability(name: str) -> Gate:
    if name not in CAPABILITY_ORG_ROLES:
        raise ValueError(f"unknown capability {name!r}")

    async def admit(request: Request) -> None:
        session = require_session(request)
        if not capability_allows(name, session.org_role, session.platform_role):
            raise forbidden(f"This operation needs the {name!r} capability.")

    return Gate(f"capability:{name}", admit)
