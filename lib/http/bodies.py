"""Request bodies and query values, checked before any handler logic: a JSON body validated
against a pydantic model, and bounded integer query parameters. Bad input is a 400 naming the
problem (every failing field with its message), never a traceback."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TypeVar

from starlette.requests import Request

from lib.http.errors import ApiError
from lib.lazy_imports import lazy_import

if TYPE_CHECKING:
    from pydantic import BaseModel

pydantic = lazy_import("pydantic")

Model = TypeVar("Model", bound="BaseModel")


async def json_body(request: Request, model: type[Model], code: str) -> Model:
    """The body as ``model``: 415 ``unsupported_media_type`` unless it is declared
    ``application/json`` (a form or ``text/plain`` body is what a cross-site page can send),
    400 ``invalid_json`` when it is not JSON, 400 ``code`` naming each problem when it does not fit."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "The body must be sent as application/json.")
    try:
        return model.model_validate(json.loads(await request.body()))
    except json.JSONDecodeError:
        raise ApiError(400, "invalid_json", "The body must be a JSON object.") from None
    except pydantic.ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, issue['loc'])) or 'body'}: {issue['msg']}" for issue in error.errors()
        )
        raise ApiError(400, code, problems) from None


def int_query(request: Request, name: str, default: int, maximum: int) -> int:
    """``?name=`` as an integer in ``1..maximum``; absent → ``default``; anything else → 400."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise ApiError(400, f"invalid_{name}", f"{name} must be an integer from 1 to {maximum}.")
    return int(raw)
