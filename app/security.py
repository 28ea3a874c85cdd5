"""Response headers every answer carries."""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _policy(frame_ancestors: str) -> str:
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",  # no inline script, no third-party origin
            "style-src 'self' 'unsafe-inline'",  # plotly.js sets inline styles on its SVG
            "img-src 'self' data: blob:",  # Plotly's PNG export builds data: and blob: URLs
            "connect-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            f"frame-ancestors {frame_ancestors}",
            "form-action 'self'",
        ]
    )


CONTENT_SECURITY_POLICY = _policy("'none'")

SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
EMBEDDABLE = re.compile(r"^/heads?/")
"""Pages that `?embed=1` lets any site frame (a head's page, the scatter: read-only views, for
an iframe in slides or a blog); every other answer may not be framed at all."""
EMBED_HEADERS = [
    (b"content-security-policy", _policy("*").encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def headers_for(scope: Scope) -> list[tuple[bytes, bytes]]:
    """SECURITY_HEADERS, or EMBED_HEADERS for an embeddable page asked with embed=1."""
    if EMBEDDABLE.match(scope.get("path", "")) and (b"embed", b"1") in [
        tuple(pair.split(b"=", 1)) for pair in scope.get("query_string", b"").split(b"&")
    ]:
        return EMBED_HEADERS
    return SECURITY_HEADERS


class SecurityHeadersMiddleware:
    """Adds SECURITY_HEADERS to every HTTP response (pure ASGI, so streaming is untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers_for(scope)]
            await send(message)

        await self.app(scope, receive, send_with_headers)
