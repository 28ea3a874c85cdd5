"""Transport limits as pure ASGI middleware: request bodies (size 413, time 408), stalled
readers (answers go out in bounded chunks; a reader that takes none for too long is dropped),
and a per-client rate limit (429)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import ErrorCode, error_body

log = logging.getLogger("attention_atlas")

SEND_CHUNK_BYTES = 256 * 1024
"""Largest piece of an answer handed to the server at once. The server buffers at most one
piece (plus its socket buffers) for a reader that has stopped reading."""


def _kernel_send_buffer_bytes() -> int:
    """The most one connection's kernel send buffer holds: Linux grows it up to the largest of
    net.ipv4.tcp_wmem (4 MiB by default), read once; 4 MiB where that cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 * 2**20


KERNEL_SEND_BUFFER_BYTES = _kernel_send_buffer_bytes()
"""What the kernel may take of an answer into its connection's send buffer while a slow reader
takes it: memory outside the process, but charged to the server's cgroup in a container."""

T = TypeVar("T")

if sys.version_info >= (3, 11):

    async def _within(awaitable: Awaitable[T], seconds: float) -> T:
        """await `awaitable`, raising TimeoutError after `seconds`: in this task (wait_for
        wraps it in a task of its own before Python 3.12, one more turn of the loop)."""
        async with asyncio.timeout(seconds):
            return await awaitable

else:  # pragma: no cover - Python 3.10

    async def _within(awaitable: Awaitable[T], seconds: float) -> T:
        """await `awaitable`, raising TimeoutError after `seconds`."""
        return await asyncio.wait_for(awaitable, seconds)


async def _reject(
    send: Send, status: int, code: ErrorCode, detail: str, headers: list | None = None
) -> None:
    body = json.dumps(error_body(detail, code)).encode()
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


class _BodyRefused(Exception):
    def __init__(self, status: int, code: ErrorCode, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


class RequestBodyGuard:
    """Refuse bodies over max_bytes (413, by Content-Length or while streaming) and bodies whose
    next piece takes longer than timeout seconds to arrive (408)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    def _too_big(self) -> _BodyRefused:
        return _BodyRefused(
            413,
            "too_large",
            f"the request body is larger than {self.max_bytes:,} bytes; send less "
            "(the limit is ATLAS_MAX_BODY_BYTES)",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                refusal = self._too_big()
                await _reject(send, refusal.status, refusal.code, refusal.detail)
                return
        received = 0
        body_done = False
        refused: _BodyRefused | None = None
        started = False

        async def guarded_receive() -> Message:
            nonlocal received, body_done, refused
            if body_done:
                return await receive()
            try:
                message = await _within(receive(), self.timeout)
            except asyncio.TimeoutError:
                refused = _BodyRefused(
                    408,
                    "body_timeout",
                    f"the request body did not arrive within {self.timeout:g} s; send it at once",
                )
                raise refused from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_bytes:
                    refused = self._too_big()
                    raise refused
            else:
                body_done = True
            return message

        async def guarded_send(message: Message) -> None:
            # The framework may turn a failed body read into its own error answer: swap ours in.
            nonlocal started
            if refused is not None:
                if not started:
                    started = True
                    await _reject(send, refused.status, refused.code, refused.detail)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except _BodyRefused as refusal:
            if not started:
                await _reject(send, refusal.status, refusal.code, refusal.detail)


class _ReaderStalled(Exception):
    pass


def _pieces(body: bytes | memoryview) -> Iterator[tuple[bytes, bool]]:
    """(piece, whether it is the last) of at most SEND_CHUNK_BYTES each, as bytes (what ASGI
    servers take): a bytes body that fits one piece as it is, anything else a copied slice at
    a time (an answer's pieces may be buffers written in place: app.serialize)."""
    if len(body) <= SEND_CHUNK_BYTES:
        yield (body if isinstance(body, bytes) else bytes(body)), True
        return
    view = memoryview(body)
    for start in range(0, len(body), SEND_CHUNK_BYTES):
        end = start + SEND_CHUNK_BYTES
        yield bytes(view[start:end]), end >= len(body)


class SendGuard:
    """Hand answers to the server in pieces of at most SEND_CHUNK_BYTES, and give up on a
    reader that has not taken a piece within `timeout` seconds.

    The server writes each piece only once the previous one has drained, so a reader that
    stops reading holds at most one piece here; after the timeout its answer is abandoned and
    the connection closed, which frees whatever the answer was holding.
    """

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_in_pieces(message: Message) -> None:
            if message["type"] != "http.response.body":
                await send(message)
                return
            body = message.get("body", b"")
            more = message.get("more_body", False)
            for piece, last in _pieces(body):
                try:
                    await _within(
                        send({"type": "http.response.body", "body": piece,
                              "more_body": more or not last}),
                        self.timeout,
                    )  # fmt: skip
                except asyncio.TimeoutError:
                    raise _ReaderStalled from None

        try:
            await self.app(scope, receive, send_in_pieces)
        except _ReaderStalled:
            client = (scope.get("client") or ("?", 0))[0]
            log.warning(
                "stopped sending %s to %s: it read nothing for %g s",
                scope.get("path", ""),
                client,
                self.timeout,
            )


class RateLimit:
    """Token bucket per client address: `per_minute` requests a minute, bursts up to that many.

    Only /api/ routes count, except /api/health (health checks must never be throttled). The
    client address is the connection's peer; behind a reverse proxy, ProxyHeaders (added only
    for the proxies the operator trusts) replaces it with the forwarded one first.
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
                "rate_limited",
                f"too many requests: at most {self.per_minute} a minute per client; retry in {retry} s",
                [(b"retry-after", retry.encode())],
            )
            return
        await self.app(scope, receive, send)
