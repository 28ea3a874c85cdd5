"""Domain errors, and the one place they become HTTP responses."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


class AtlasError(Exception):
    """Base for errors a client can act on. `status` is the HTTP status it maps to."""

    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(AtlasError):
    status = 422


class UnknownModel(AtlasError):
    status = 404


class ModelUnavailable(AtlasError):
    status = 503


class RequestCancelled(AtlasError):
    """The client went away; the forward pass stopped at the next layer boundary."""

    status = 499


def describe_validation_errors(errors: list[dict]) -> str:
    """One readable sentence from pydantic's error list, e.g. 'body.q: q is ragged: ...'."""
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        if message == "JSON decode error":
            where, message = "", f"the body is not valid JSON (error at character {where or 0})"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AtlasError)
    async def atlas_error(_: Request, exc: AtlasError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # The offending input is not echoed back: it may be a megabyte of text.
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
            for e in exc.errors()
        ]
        return JSONResponse(
            {"detail": describe_validation_errors(errors), "errors": errors}, status_code=422
        )
