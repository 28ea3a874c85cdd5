"""Request-size limit (413) and a per-client rate limit (429), as pure ASGI middleware."""

from __future__ import annotations

import json
import threading
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def _reject(send: Send, status: int, detail: str, headers: list | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodySizeLimit:
    """Refuse bodies over max_bytes with 413, by Content-Length or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = (
            f"the request body is larger than {self.max_bytes:,} bytes; send less "
            "(the limit is ATLAS_MAX_BODY_BYTES)"
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await _reject(send, 413, message)
                    return
        received = 0
        too_big = False
        replaced = False

        async def limited_receive() -> Message:
            nonlocal received, too_big
            msg = await receive()
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                if received > self.max_bytes:
                    too_big = True
                    raise _BodyTooLarge
            return msg

        async def guarded_send(msg: Message) -> None:
            # The framework turns a failed body read into its own error answer; swap in the 413.
            nonlocal replaced
            if too_big:
                if not replaced:
                    replaced = True
                    await _reject(send, 413, message)
                return
            await send(msg)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyTooLarge:
            if not replaced:
                await _reject(send, 413, message)


class _BodyTooLarge(Exception):
    pass


class RateLimit:
    """Token bucket per client address: `per_minute` requests a minute, bursts up to that many.

    Only /api/ routes count, except /api/health (health checks must never be throttled).
    """

    def __init__(self, app: ASGIApp, per_minute: int, max_clients: int = 10_000) -> None:
        self.app = app
        self.per_minute = per_minute
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _allow(self, client: str) -> float:
        """0 if the request may go ahead, else the seconds until it could."""
        now = time.monotonic()
        rate = self.per_minute / 60.0
        with self._lock:
            tokens, last = self._buckets.get(client, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - last) * rate)
            if tokens >= 1:
                self._buckets[client] = (tokens - 1, now)
                wait = 0.0
            else:
                self._buckets[client] = (tokens, now)
                wait = (1 - tokens) / rate
            if len(self._buckets) > self.max_clients:  # forget the stalest clients
                for key, _ in sorted(self._buckets.items(), key=lambda kv: kv[1][1])[
                    : self.max_clients // 10
                ]:
                    del self._buckets[key]
        return wait

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or self.per_minute <= 0
            or not path.startswith("/api/")
            or path == "/api/health"
        ):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("unknown", 0))[0]
        wait = self._allow(client)
        if wait > 0:
            retry = str(max(1, round(wait)))
            await _reject(
                send,
                429,
                f"too many requests: at most {self.per_minute} a minute per client; retry in {retry} s",
                [(b"retry-after", retry.encode())],
            )
            return
        await self.app(scope, receive, send)
