"""The one place domain errors become HTTP responses: ``{code, message, details}``."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from parley.core import errors as e

log = logging.getLogger("parley.rest")

STATUS: list[tuple[type[e.ParleyError], int]] = [
    (e.Unauthenticated, 401),
    (e.PermissionDenied, 403),
    (e.NotFound, 404),
    (e.Conflict, 409),
    (e.TooLarge, 413),
    (e.RateLimited, 429),
    (e.InvalidRequest, 400),
    (e.CallerError, 400),
    (e.StorageFull, 507),
    (e.SchemaTooNew, 503),
    (e.StorageError, 503),
    (e.RuntimeFailure, 502),
    (e.ParleyError, 500),
]

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
}


class ErrorBody(BaseModel):
    """Every refusal: a stable machine code, a message for a person, and details."""

    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": desc}
    for status, desc in [
        (400, "Invalid request"),
        (401, "Missing or invalid bearer token"),
        (403, "Not allowed"),
        (404, "Not found"),
        (409, "Conflict with the current state"),
        (413, "Larger than the hub's size limit (the message says which, and the limit)"),
        (422, "Validation error"),
    ]
}


def status_for(exc: e.ParleyError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


# Characters RFC 6750 allows inside error_description; anything else is left out.
_NOT_DESCRIPTION = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


def bearer_challenge(exc: e.Unauthenticated) -> str:
    """The ``WWW-Authenticate`` header of a 401 (RFC 6750 section 3): a request without a token
    gets the bare challenge, a bad token ``error="invalid_token"`` and what to do about it."""
    if exc.code == "missing_token":
        return 'Bearer realm="parley"'
    description = _NOT_DESCRIPTION.sub("", exc.message)
    return f'Bearer realm="parley", error="invalid_token", error_description="{description}"'


def _response(
    status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


async def parley_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, e.ParleyError)
    status = status_for(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, e.RateLimited):
        headers["Retry-After"] = str(max(1, int(exc.retry_after + 0.999)))
    if isinstance(exc, e.Unauthenticated):
        headers["WWW-Authenticate"] = bearer_challenge(exc)
    # A full disk refuses every write until it has room: the store logs that once, not a
    # traceback a request (the log may be on the full disk too).
    if status >= 500 and not isinstance(exc, e.StorageFull):
        log.error("request failed: %s", exc, exc_info=exc)
    return _response(status, exc.to_dict(), headers)


async def validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": list(err.get("loc", ())), "msg": str(err.get("msg", "")), "type": err.get("type")}
        for err in exc.errors()
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid"}
    where = ".".join(str(p) for p in first["loc"])
    return _response(
        422,
        {
            "code": "validation_error",
            "message": f"the request is not valid: {where}: {first['msg']}",
            "details": {"errors": errors},
        },
    )


async def http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code
    if exc.status_code == 404 and message == "Not Found":
        message = "no such endpoint; see /docs for the API"
    return _response(
        exc.status_code, {"code": code, "message": message, "details": {}}, exc.headers
    )


async def unexpected_error(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error", exc_info=exc)
    return _response(
        500,
        {
            "code": "internal_error",
            "message": "the hub failed unexpectedly; see its log",
            "details": {},
        },
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(e.ParleyError, parley_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected_error)
