"""Transport limits as pure ASGI middleware: request bodies (counted in the in-flight budget as
they arrive, 503; size 413; time 408), stalled readers (answers go out in bounded chunks; a
reader that takes none for too long is dropped), and a per-client rate limit (429)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING, TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from atlas_engine.errors import ErrorCode, error_body
from atlas_engine.serialize import SEND_CHUNK_BYTES

if TYPE_CHECKING:
    from atlas_engine.inference.inflight import AnswerBudget, Reservation

log = logging.getLogger("attention_atlas")


PARSED_BODY_FACTOR = 48
"""What a request body may cost in memory once whole, as a multiple of its bytes: the bytes,
the JSON parsed from them and the model validated from that, for the costliest JSON measured
(docs/performance.md, "What a request body costs"). A body still arriving holds its bytes."""

REQUEST_BODIES = "request bodies"
"""What the body guard's reservations hold, as the in-flight budget's refusals name it."""

T = TypeVar("T")

if sys.version_info >= (3, 11):

    async def _within(awaitable: Awaitable[T], seconds: float) -> T:
        """await `awaitable`, raising TimeoutError after `seconds`: in this task (wait_for
        wraps it in a task of its own before Python 3.12, one more turn of the loop)."""
        async with asyncio.timeout(seconds):
            return await awaitable

    async def _before(awaitable: Awaitable[T], deadline: float) -> T:
        """await `awaitable`, raising TimeoutError at `deadline` (the event loop's clock)."""
        async with asyncio.timeout_at(deadline):
            return await awaitable

else:  # pragma: no cover - Python 3.10

    async def _within(awaitable: Awaitable[T], seconds: float) -> T:
        """await `awaitable`, raising TimeoutError after `seconds`."""
        return await asyncio.wait_for(awaitable, seconds)

    async def _before(awaitable: Awaitable[T], deadline: float) -> T:
        """await `awaitable`, raising TimeoutError at `deadline` (the event loop's clock)."""
        left = deadline - asyncio.get_running_loop().time()
        return await asyncio.wait_for(awaitable, max(0.0, left))


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
    def __init__(
        self, status: int, code: ErrorCode, detail: str, headers: list | None = None
    ) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.headers = status, code, detail, headers


def _content_length(scope: Scope) -> int | None:
    """The request's Content-Length, or None when it has none (a chunked body, or no body)."""
    for name, value in scope.get("headers", []):
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


def carries_body(scope: Scope) -> bool:
    """Whether the request sends a body: a Content-Length above 0, or a Transfer-Encoding."""
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding" or (name == b"content-length" and value not in (b"", b"0")):
            return True
    return False


class _HeldForBody:
    """What one request's body holds in the in-flight budget: the bytes that have arrived, as
    they arrive, then PARSED_BODY_FACTOR times them once it is whole (it is parsed next), all
    released together when the request ends. A body claimed (Content-Length) and not sent holds
    nothing: eight heads claiming 2 MB each once held 48 times that, 733 MB of 768 MiB, for
    as long as the body's deadline, and every other client's new request got 503."""

    def __init__(self, budget: AnswerBudget) -> None:
        self.budget = budget
        self.held = 0  # bytes held in the budget
        self._parts: list[Reservation] = []

    def hold(self, nbytes: int) -> bool:
        """Hold `nbytes` in all; False (and nothing more taken) if the room is not there now."""
        if nbytes <= self.held:
            return True
        part = self.budget.try_reserve(object(), nbytes - self.held, REQUEST_BODIES)
        if part is None:
            return False
        self._parts.append(part)
        self.held = nbytes
        return True

    def release(self) -> None:
        for part in self._parts:
            part.release()
        self._parts.clear()

    def refusal(self, nbytes: int) -> _BodyRefused:
        """The 503 for a body that finds no room for `nbytes` in all: at once, with Retry-After,
        naming what fills the budget."""
        retry = str(max(1, math.ceil(self.budget.wait_seconds)))
        need = nbytes - self.held
        return _BodyRefused(
            503,
            "busy",
            f"the server holds {self.budget.held_words()} in flight, of the "
            f"{self.budget.max_bytes / 2**20:,.0f} MB it lets them hold, and this request's "
            f"body needs {need / 2**20:,.1f} MB more once read; retry in {retry} s",
            [(b"retry-after", retry.encode())],
        )


class RequestBodyGuard:
    """Count each request's body in the in-flight budget as it arrives (503 `busy` when it does
    not fit), refuse bodies over max_bytes (413, by Content-Length or while streaming), and
    bodies not whole within timeout seconds of the request's start (408).

    A body holds its bytes while they arrive, and PARSED_BODY_FACTOR times them once whole:
    the bytes, the parsed JSON and the validated model (docs/performance.md). That covers the
    request while it waits for a lane and while it runs, and is released when it ends. A
    Content-Length whose parsed body could not fit the budget now is refused before a byte is
    read; one that fits reserves nothing until its bytes come.
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int, timeout: float, budget: AnswerBudget,
        uploads: dict[str, tuple[int, str]] | None = None,
    ) -> None:  # fmt: skip
        self.app = app
        self.budget = budget
        self.max_bytes = min(max_bytes, budget.max_bytes // PARSED_BODY_FACTOR)
        self.lowered = self.max_bytes < max_bytes
        self.timeout = timeout
        # path -> (its limit, the setting that names it): bodies of files that are not parsed
        # whole (a zip read one member at a time), held once, not PARSED_BODY_FACTOR times
        self.uploads = {
            path: (min(limit, budget.max_bytes // 2), name)
            for path, (limit, name) in (uploads or {}).items()
        }

    def _too_big(self, limit_bytes: int, setting: str | None = None) -> _BodyRefused:
        limit = setting or "ATLAS_MAX_BODY_BYTES"
        if self.lowered and setting is None:
            limit += f", here ATLAS_INFLIGHT_BYTES / {PARSED_BODY_FACTOR}"
        return _BodyRefused(
            413,
            "too_large",
            f"the request body is larger than {limit_bytes:,} bytes; send less "
            f"(the limit is {limit})",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout
        length = _content_length(scope)
        held = _HeldForBody(self.budget)
        refusal: _BodyRefused | None = None
        max_bytes, setting = self.uploads.get(scope.get("path", ""), (self.max_bytes, None))
        factor = 1 if setting else PARSED_BODY_FACTOR
        parsed = (length or 0) * factor  # what the body claimed will hold, whole
        if length is not None and length > max_bytes:
            refusal = self._too_big(max_bytes, setting)
        elif parsed and self.budget.held_bytes + parsed > self.budget.max_bytes:
            refusal = held.refusal(parsed)  # a check on the claim: nothing is held for it
        if refusal is not None:  # answered without reading the body (app.transport drains it)
            await _reject(send, refusal.status, refusal.code, refusal.detail, refusal.headers)
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
                message = await _before(receive(), deadline)
            except asyncio.TimeoutError:
                refused = _BodyRefused(
                    408,
                    "body_timeout",
                    f"the request body was not whole within {self.timeout:g} s of its head; "
                    "send it at once",
                )
                raise refused from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > max_bytes:
                    refused = self._too_big(max_bytes, setting)
                    raise refused
                wanted = received * (factor if body_done else 1)
                if not held.hold(wanted):  # before the app sees the piece
                    refused = held.refusal(wanted)
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
                    await _reject(
                        send, refused.status, refused.code, refused.detail, refused.headers
                    )
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except _BodyRefused as err:
            if not started:
                await _reject(send, err.status, err.code, err.detail, err.headers)
        finally:
            held.release()


class _ReaderStalled(Exception):
    pass


def _pieces(body: bytes | memoryview) -> Iterator[tuple[bytes, bool]]:
    """(piece, whether it is the last) of at most SEND_CHUNK_BYTES each, as bytes (what ASGI
    servers take): a bytes body that fits one piece as it is, anything else a copied slice at
    a time (an answer's pieces may be buffers written in place: atlas_engine.serialize)."""
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

    /api/ routes count, except /api/health (health checks must never be throttled), and so
    does any request that carries a body, whatever its path (a body sent to a page or an
    unknown path costs the server as much to receive), before its body is read: a request the
    body guard then refuses has counted too (app.main puts this outside it). The client
    address is the connection's peer; behind a reverse proxy, ProxyHeaders (added only for the
    proxies the operator trusts) replaces it with the forwarded one first.
    """

    def __init__(self, app: ASGIApp, per_minute: int, max_clients: int = 10_000) -> None:
        self.app = app
        self.per_minute = per_minute
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _counts(scope: Scope) -> bool:
        path = scope.get("path", "")
        return (path.startswith("/api/") and path != "/api/health") or carries_body(scope)

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
        if scope["type"] != "http" or self.per_minute <= 0 or not self._counts(scope):
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
