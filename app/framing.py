"""One way to tell where a request body ends: a request with both Content-Length and
Transfer-Encoding is refused (400) and its connection closed.

h11 (RFC 7230's lenient choice) lets Transfer-Encoding win, but a proxy in front may read the
Content-Length: the two then disagree on where this request ends and the next begins (request
smuggling). RFC 9112 (6.3) says a server may reject such a request, and must then close the
connection. The check sits here, before any middleware reads a body.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from atlas_engine.errors import error_body

BOTH_LENGTHS = (
    "the request gives both Content-Length and Transfer-Encoding, so where its body ends is "
    "ambiguous; send one of them"
)


class OneBodyLength:
    """ASGI middleware: 400 `invalid_body` with `Connection: close` for a request that gives
    both Content-Length and Transfer-Encoding."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name.lower() for name, _ in scope["headers"]}
            if b"content-length" in names and b"transfer-encoding" in names:
                response = JSONResponse(
                    error_body(BOTH_LENGTHS, "invalid_body"),
                    status_code=400,
                    headers={"Connection": "close"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
