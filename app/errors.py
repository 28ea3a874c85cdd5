"""The one place errors become HTTP responses: atlas_engine's errors (AtlasError and its kinds),
FastAPI's validation errors and Starlette's HTTP errors, each as {"detail": sentence, "code":
one of atlas_engine.errors.ErrorCode}, middleware included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from atlas_engine.errors import (
    INPUT_RULE,
    AtlasError,
    ErrorCode,
    describe_validation_errors,
    error_body,
)
from atlas_engine.suggest import close_matches, did_you_mean, fields_at

log = logging.getLogger("attention_atlas")


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
