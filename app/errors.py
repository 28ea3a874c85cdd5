"""Domain errors, and the one place they become HTTP responses.

Every error body is {"detail": sentence, "code": one of ERROR_CODES}, middleware included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException

from app.suggest import close_matches, did_you_mean, fields_at

log = logging.getLogger("attention_atlas")

ErrorCode = Literal[
    "invalid_body",  # 400: not JSON, not UTF-8, or a number JSON parsers refuse
    "invalid_field",  # 422: the body breaks its JSON Schema (type, range, pattern, length)
    "input_rule",  # 422: the body fits the schema but breaks a rule JSON Schema cannot state
    "unknown_model",  # 404
    "not_found",  # 404 for a path that is not a route
    "method_not_allowed",  # 405
    "body_timeout",  # 408: the request body did not arrive in time
    "head_timeout",  # 408 from the server itself (app.transport): the request head was late
    "too_large",  # 413: the request body is over the limit
    "unsupported_media_type",  # 415: a body sent as something other than JSON
    "rate_limited",  # 429
    "model_unavailable",  # 503: the model cannot be loaded here; the detail says why
    "busy",  # 503: too many large answers in flight; retry after Retry-After seconds
]
INPUT_RULE: ErrorCode = "input_rule"


class AtlasError(Exception):
    """Base for errors a client can act on. `status` is the HTTP status it maps to."""

    status = 400
    code: ErrorCode = "invalid_body"

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class InvalidInput(AtlasError):
    """The request fits its schema but breaks a rule that depends on the model or the text."""

    status = 422
    code: ErrorCode = INPUT_RULE


class UnknownModel(AtlasError):
    status = 404
    code: ErrorCode = "unknown_model"


class NotFound(AtlasError):
    """A named thing (a lesson) that this server does not have; the message lists those it has."""

    status = 404
    code: ErrorCode = "not_found"


class ModelUnavailable(AtlasError):
    status = 503
    code: ErrorCode = "model_unavailable"


class ServerBusy(AtlasError):
    """Too many large answers are being sent; the client should retry after `retry_after` s."""

    status = 503
    code: ErrorCode = "busy"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, {"Retry-After": str(retry_after)})


class RequestCancelled(AtlasError):
    """The client went away; the forward pass stopped at the next layer boundary."""

    status = 499


def input_rule(message: str) -> PydanticCustomError:
    """A validator's error for a rule JSON Schema cannot state (ragged rows, shapes that must
    agree); the 422 answer carries code 'input_rule' so clients can tell it from a type error."""
    return PydanticCustomError(INPUT_RULE, message)


def describe_validation_errors(errors: list[dict]) -> str:
    """One readable sentence from pydantic's error list, e.g. 'q: q is ragged: ...'."""
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or "invalid request"


def error_body(detail: str, code: ErrorCode, **extra) -> dict:
    return {"detail": detail, "code": code, **extra}


def _not_read_as_json(error: dict) -> bool:
    """Whether FastAPI left the body as bytes: it parses a body as JSON only when its
    Content-Type says JSON (application/json or */*+json), and a missing one does not."""
    return tuple(error.get("loc", ())) == ("body",) and isinstance(error.get("input"), bytes)


def not_json_detail(content_type: str | None) -> str:
    """The 415 answer's sentence: what the body was sent as, and the header to send instead."""
    if not content_type:
        sent = "without a Content-Type header"
    elif content_type.startswith("application/x-www-form-urlencoded"):
        sent = "as a form (application/x-www-form-urlencoded, what `curl -d` sends by default)"
    else:
        sent = f"as {content_type[:100]!r}"
    return (
        f"the body was sent {sent}; send it as JSON with the header "
        "Content-Type: application/json (curl: -H 'Content-Type: application/json')"
    )


def _message(request: Request, error: dict) -> str:
    """pydantic's message for one error; for an unknown field, the nearest field there is."""
    message = str(error.get("msg", ""))
    loc = tuple(error.get("loc", ()))
    route = request.scope.get("route")
    body = getattr(getattr(route, "body_field", None), "field_info", None)
    if error.get("type") != "extra_forbidden" or loc[:1] != ("body",) or body is None:
        return message
    fields = fields_at(body.annotation, loc[1:-1])
    if not fields:
        return message
    nearest = close_matches(str(loc[-1]), fields)
    if nearest:
        return f"unknown field; {did_you_mean(nearest)}"
    return f"unknown field; the fields here are {', '.join(fields)}"


HTTP_CODES: dict[int, ErrorCode] = {
    400: "invalid_body",
    404: "not_found",
    405: "method_not_allowed",
    408: "body_timeout",
    413: "too_large",
    429: "rate_limited",
}


def wants_a_page(request: Request) -> bool:
    """Whether a 404 goes to a browser reading pages: the request accepts HTML and its path is
    not the API's (API paths answer JSON whatever they accept)."""
    path = request.url.path
    api = path == "/api" or path.startswith("/api/")
    return not api and "text/html" in request.headers.get("accept", "")


NotFoundPage = Callable[[Request, str], Response]  # (request, detail) -> the HTML 404 page


def install_error_handlers(app: FastAPI, not_found_page: NotFoundPage | None = None) -> None:
    """Every error as {"detail", "code"} JSON; a 404 that a browser asked for as a page is
    `not_found_page` (app.web.pages: what was not found, and where to go instead)."""

    def page_for(request: Request, status: int, detail: str) -> Response | None:
        if status == 404 and not_found_page is not None and wants_a_page(request):
            return not_found_page(request, detail)
        return None

    @app.exception_handler(AtlasError)
    async def atlas_error(request: Request, exc: AtlasError) -> Response:
        page = page_for(request, exc.status, exc.message)
        if page is not None:
            return page
        return JSONResponse(
            error_body(exc.message, exc.code), status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = exc.errors()
        if any(e.get("type") == "json_invalid" for e in raw):
            position = next(iter(raw[0].get("loc", ())[1:]), 0)
            return JSONResponse(
                error_body(f"the body is not valid JSON (error at character {position})",
                           "invalid_body"),
                status_code=400,
            )  # fmt: skip
        if any(_not_read_as_json(e) for e in raw):
            detail = not_json_detail(request.headers.get("content-type"))
            return JSONResponse(error_body(detail, "unsupported_media_type"), status_code=415)
        # The offending input is not echoed back: it may be a megabyte of text.
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": _message(request, e)} for e in raw
        ]
        code = INPUT_RULE if all(e.get("type") == INPUT_RULE for e in raw) else "invalid_field"
        return JSONResponse(
            error_body(describe_validation_errors(errors), code, errors=errors), status_code=422
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        page = page_for(request, exc.status_code, str(exc.detail))
        if page is not None:
            return page
        detail = exc.detail
        if exc.status_code == 400 and detail == "There was an error parsing the body":
            detail = (
                "the body could not be parsed: send UTF-8 JSON (integers of at most 4300 digits)"
            )
        return JSONResponse(
            error_body(str(detail), HTTP_CODES.get(exc.status_code, "invalid_body")),
            status_code=exc.status_code,
            headers=exc.headers,
        )
