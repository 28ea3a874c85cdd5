"""Errors a client can act on, each with the HTTP status and the code its answer carries.

The server turns them into responses (app/errors.py); the library raises them as they are.
Every error body is {"detail": sentence, "code": one of ErrorCode}.
"""

from __future__ import annotations

from typing import Literal

from pydantic_core import PydanticCustomError

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
    "store_unavailable",  # 503: the corpus store was unreadable and has been moved aside
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


class StoreUnavailable(AtlasError):
    """The corpus store could not be read (not SQLite, or damaged): it has been moved aside and
    a new one starts empty; the message says where it went. Retry: the next read finds none."""

    status = 503
    code: ErrorCode = "store_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message, {"Retry-After": "1"})


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
