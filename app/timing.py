"""Where a request's time went, told in its answer's `Server-Timing` header (W3C Server Timing,
which browsers' developer tools show beside the request): every /api/ answer the app makes
carries `app` and, where they happened, the stages below, each `name;dur=milliseconds`.

The stages are timed where they happen (atlas_engine.timing); the middleware here collects
them for each /api/ request and writes the header.
"""

from __future__ import annotations

import time

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from atlas_engine.timing import STAGES, collecting

HEADER = "Server-Timing"
TIMED = "/api/"
"""The paths whose answers carry the header (and name it in OpenAPI): those starting so."""


def header_value(stages: dict[str, float]) -> str:
    """'app;dur=9.391, queue;dur=0.187, ...': the stages in STAGES' order, in milliseconds."""
    return ", ".join(f"{name};dur={stages[name] * 1000:.3f}" for name in STAGES if name in stages)


class ServerTimingMiddleware:
    """Times each /api/ request and adds the Server-Timing header to its answer's head (pure
    ASGI, outermost: the rate limit's and the body guard's answers carry it too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(TIMED):
            await self.app(scope, receive, send)
            return
        stages: dict[str, float] = {}
        start = time.perf_counter()

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                stages["app"] = time.perf_counter() - start
                timing = (HEADER.lower().encode(), header_value(stages).encode())
                message["headers"] = [*message.get("headers", []), timing]
            await send(message)

        with collecting(stages):
            await self.app(scope, receive, send_with_timing)


def _document(openapi: dict) -> dict:
    """Describe the header once in an OpenAPI document: in the API's description (every /api/
    answer carries it, errors included) and as components.headers[HEADER], which each /api/
    operation's success answer names by reference. (Written out on every status of every
    operation, it made each operation in /docs pages long: 226 copies, 45 % of the document.)"""
    stages = "\n".join(f"- `{name}`: {what}" for name, what in STAGES.items())
    info = openapi.setdefault("info", {})
    info["description"] = (
        info.get("description", "")
        + f"\n\n**{HEADER}.** Every answer of an `/api/` route, errors included, says where "
        "its time went in a `Server-Timing` header (`name;dur=milliseconds`, shown by browsers' "
        "developer tools beside the request), with these stages where they happened:\n\n"
        + stages
        + "\n\n(A 408 for a request head that never arrived is the server's own, before the "
        "app, and has none.)"
    ).strip()
    openapi.setdefault("components", {}).setdefault("headers", {})[HEADER] = {
        "description": "Where this request's time went, in milliseconds, by stage (see the "
        "API's description). Error answers carry it too.",
        "schema": {"type": "string"},
    }
    reference = {"$ref": f"#/components/headers/{HEADER}"}
    for path, operations in openapi.get("paths", {}).items():
        if not path.startswith(TIMED):
            continue
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                if str(status).startswith("2"):
                    response.setdefault("headers", {})[HEADER] = reference
    return openapi


def install(app: FastAPI) -> None:
    """Time every /api/ answer of `app` (added last, the middleware is the outermost) and name
    the header in its OpenAPI document, as FastAPI builds it."""
    app.add_middleware(ServerTimingMiddleware)
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = _document(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
