"""The HTTP protocol the server speaks: uvicorn's h11 protocol, with a deadline for each request
head.

uvicorn waits for a request head for as long as its client takes, so a client that opens a
connection and sends nothing, or half a head, holds that connection (and its file descriptor)
for good. Here each head must arrive whole within `head_timeout` seconds of the connection
opening or of the last answer on it: a client that has sent part of one gets a 408 and the
connection is closed; one that has sent nothing is closed without a word, as uvicorn closes an
idle keep-alive connection. The body's own deadline is app.limits.RequestBodyGuard's, and h11
bounds what it buffers of an unfinished head (app.__main__).
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.security import SECURITY_HEADERS


class HeadDeadlineProtocol(H11Protocol):
    """H11Protocol that closes a connection whose next request head is late (module docstring).
    Subclass it with head_timeout set (head_deadline_protocol) to hand it to uvicorn."""

    head_timeout: float = 20.0
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a whole head has arrived
            self._disarm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start the next pipelined request already
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.head_timeout, self._head_too_late)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_late(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        received, _ = self.conn.trailing_data  # the part of a head h11 holds, unparsed
        if received:
            detail = f"the request head did not arrive within {self.head_timeout:g} s"
            self.transport.write(request_timeout(detail))
        self.transport.close()


def request_timeout(detail: str) -> bytes:
    """A whole 408 answer, in the API's error shape and with every answer's security headers,
    that closes its connection."""
    body = json.dumps({"detail": detail, "code": "head_timeout"}).encode("utf-8")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
        *SECURITY_HEADERS,
    ]
    lines = [b"HTTP/1.1 408 Request Timeout", *(name + b": " + value for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def head_deadline_protocol(seconds: float) -> type[HeadDeadlineProtocol]:
    """HeadDeadlineProtocol with head_timeout = seconds, for uvicorn's `http` option."""
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"head_timeout": seconds})
