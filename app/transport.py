"""The HTTP protocol the server speaks: uvicorn's h11 protocol, with a deadline for each request
head, caps on open connections, and no connection held by a body nobody reads.

- **Head deadline.** uvicorn waits for a request head for as long as its client takes, so a
  client that opens a connection and sends nothing, or half a head, holds that connection (and
  its file descriptor) for good. Here each head must arrive whole within `head_timeout` seconds
  of the connection opening or of the last answer on it: a client that has sent part of one
  gets a 408 and the connection is closed; one that has sent nothing is closed without a word,
  as uvicorn closes an idle keep-alive connection. The body's own deadline is
  app.limits.RequestBodyGuard's, and h11 bounds what it buffers of an unfinished head
  (app.__main__).
- **Connection caps** (ConnectionCaps). uvicorn accepts every connection until the process runs
  out of file descriptors; then it cannot accept any, /api/health included. Here one client
  address may hold `per_client` connections (reverse proxies it trusts excepted) and all
  together `total`; a connection past either cap gets a ready-made 503 with Retry-After at once
  and is closed, before anything it sent is read. Past `total`, HEALTH_RESERVE more connections
  are let in from addresses that hold no other, each to answer GET /api/health once: a probe
  (Kubernetes' kubelet, Docker's HEALTHCHECK) is answered while clients fill the server.
- **Unread bodies.** When a route answers without reading the request's body (404, 405, a 413
  by Content-Length, a 503 before reading), the client may go on sending it, and uvicorn would
  discard it for as long as it comes. Here the connection is half-closed after the answer, what
  still arrives is discarded for at most UNREAD_BODY_DRAIN_SECONDS, and then it is closed.
  (Closing at once would make the kernel reset the connection, which can destroy the answer
  before the client reads it.)
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.security import SECURITY_HEADERS

if TYPE_CHECKING:
    from atlas_engine.config import Settings

log = logging.getLogger("attention_atlas")

HEALTH_PATH = "/api/health"
HEALTH_RESERVE = 16
"""Connections let in past ConnectionCaps.total that answer only GET /api/health."""
RESERVE_HEAD_SECONDS = 1.0
"""How long a connection in the health reserve waits for its request head (a probe sends it at
once; a connection that sends nothing must not keep a place in the reserve)."""
UNREAD_BODY_DRAIN_SECONDS = 2.0
"""How long a body nobody reads is discarded after its answer before the connection closes."""
OVER_CAP_RETRY_AFTER_SECONDS = 5
_RETRY_AFTER = (b"retry-after", str(OVER_CAP_RETRY_AFTER_SECONDS).encode("ascii"))


@dataclass(frozen=True)
class ConnectionCaps:
    """The most connections all clients (`total`) and one client address (`per_client`) may
    hold open; addresses in `exempt` (trusted reverse proxies, through which every client
    comes) count only towards the total."""

    total: int
    per_client: int
    exempt: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionCaps:
        networks = (ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies)
        return cls(settings.max_connections, settings.max_connections_per_client, tuple(networks))


@lru_cache(maxsize=4096)
def _is_exempt(address: str, exempt: tuple) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in exempt)


class HeadDeadlineProtocol(H11Protocol):
    """H11Protocol with a head deadline, connection caps and unread bodies drained (module
    docstring). Subclass it with head_timeout and caps set (head_deadline_protocol) to hand it
    to uvicorn."""

    head_timeout: float = 20.0
    caps: ConnectionCaps | None = None
    open_per_client: ClassVar[Counter[str]] = Counter()  # one per subclass: its server's
    _head_deadline: asyncio.TimerHandle | None = None
    _drain_deadline: asyncio.TimerHandle | None = None
    _refused = False
    _draining = False
    _client_address: str | None = None
    _head_seconds: float | None = None
    over_total: bytes = b""  # the ready-made answers to connections over a cap
    over_per_client: bytes = b""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self.caps is not None and not self._admit(transport, self.caps):
            return
        super().connection_made(transport)
        self._arm_head_deadline()

    def _admit(self, transport: asyncio.Transport, caps: ConnectionCaps) -> bool:
        """Count the connection against the caps; False when it was refused and closed."""
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple | list) and peer else None
        open_now = len(self.server_state.connections)
        refusal = None
        held_here = self.open_per_client[address] if address is not None else 0
        if open_now >= caps.total + HEALTH_RESERVE or (open_now >= caps.total and held_here):
            refusal = self.over_total  # the reserve is for addresses that hold no connection
        elif (
            address is not None
            and held_here >= caps.per_client
            and not _is_exempt(address, caps.exempt)
        ):
            refusal = self.over_per_client
        if refusal is not None:
            self._refused = True
            transport.write(refusal)
            transport.close()
            _note_refusal(open_now)
            return False
        if address is not None:
            self._client_address = address
            self.open_per_client[address] += 1
        if open_now >= caps.total:  # in the health reserve
            self.app = _health_only(self.app)
            self._head_seconds = min(self.head_timeout, RESERVE_HEAD_SECONDS)
        return True

    def data_received(self, data: bytes) -> None:
        if self._refused or self._draining:
            return  # nothing more is read from it
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a whole head has arrived
            self._disarm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start the next pipelined request already
        if self.transport.is_closing():
            return
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.SEND_BODY:
            self._drain_then_close()  # answered, and the body it came with was not read
        elif self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        if self._client_address is not None:
            left = self.open_per_client[self._client_address] - 1
            if left > 0:
                self.open_per_client[self._client_address] = left
            else:
                del self.open_per_client[self._client_address]
            self._client_address = None
        self._disarm_head_deadline()
        if self._drain_deadline is not None:
            self._drain_deadline.cancel()
        super().connection_lost(exc)

    def _drain_then_close(self) -> None:
        """Half-close after the answer, discard what still comes, close at the latest after
        UNREAD_BODY_DRAIN_SECONDS (sooner if the client closes its side: eof_received). A
        client already gone (the half-close fails: ENOTCONN) is closed at once: a refusal the
        server meant to make is its one access-log line, where it was a traceback (a flood of
        refused heads closed as soon as answered wrote one for 1,036 of 3,784 of them)."""
        self._draining = True
        self._unset_keepalive_if_required()
        if self.transport.can_write_eof():
            try:
                self.transport.write_eof()
            except OSError:  # the client has gone: nothing to drain
                self.transport.close()
                return
        self._drain_deadline = self.loop.call_later(UNREAD_BODY_DRAIN_SECONDS, self.transport.close)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        seconds = self._head_seconds or self.head_timeout
        self._head_deadline = self.loop.call_later(seconds, self._head_too_late)

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
            seconds = self._head_seconds or self.head_timeout
            detail = f"the request head did not arrive within {seconds:g} s"
            self.transport.write(request_timeout(detail))
        self.transport.close()


_refusals = {"count": 0, "logged_at": 0.0}


def _note_refusal(open_now: int) -> None:
    """Log refused connections at most once a minute, with how many there were."""
    _refusals["count"] += 1
    now = time.monotonic()
    if now - _refusals["logged_at"] >= 60:
        log.warning(
            "refused %d connections over the connection caps in the last minute (%d open)",
            _refusals["count"],
            open_now,
        )
        _refusals["count"], _refusals["logged_at"] = 0, now


def _health_only(app: ASGIApp) -> ASGIApp:
    """`app` for a connection in the health reserve: GET or HEAD /api/health is answered (and
    the connection then closed); anything else gets the over-capacity 503."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("path") == HEALTH_PATH and scope.get("method") in ("GET", "HEAD"):

            async def closing(message: Message) -> None:
                if message["type"] == "http.response.start":
                    headers = [*message.get("headers", []), (b"connection", b"close")]
                    message = {**message, "headers": headers}
                await send(message)

            await app(scope, receive, closing)
            return
        body, headers = _error("busy", _total_detail(), _RETRY_AFTER)
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return serve


def _error(code: str, detail: str, *extra: tuple[bytes, bytes]) -> tuple[bytes, list]:
    """The body and headers of an error answer in the API's shape that closes its connection,
    with every answer's security headers."""
    body = json.dumps({"detail": detail, "code": code}).encode("utf-8")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
        *extra,
        *SECURITY_HEADERS,
    ]
    return body, headers


def _whole_answer(status_line: bytes, code: str, detail: str, *extra: tuple[bytes, bytes]) -> bytes:
    body, headers = _error(code, detail, *extra)
    lines = [status_line, *(name + b": " + value for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def request_timeout(detail: str) -> bytes:
    """A whole 408 answer that closes its connection."""
    return _whole_answer(b"HTTP/1.1 408 Request Timeout", "head_timeout", detail)


def _total_detail() -> str:
    return (
        "the server has as many connections open as it takes (ATLAS_MAX_CONNECTIONS); "
        f"retry in {OVER_CAP_RETRY_AFTER_SECONDS} s"
    )


def over_capacity(detail: str) -> bytes:
    """A whole 503 `busy` answer with Retry-After that closes its connection."""
    return _whole_answer(b"HTTP/1.1 503 Service Unavailable", "busy", detail, _RETRY_AFTER)


def head_deadline_protocol(
    seconds: float, settings: Settings | None = None
) -> type[HeadDeadlineProtocol]:
    """HeadDeadlineProtocol with head_timeout = seconds, and the connection caps of `settings`
    (none without them), for uvicorn's `http` option."""
    caps = ConnectionCaps.from_settings(settings) if settings is not None else None
    per_client = (
        f"this address has {caps.per_client} connections open here, the most one client may "
        f"(ATLAS_MAX_CONNECTIONS_PER_CLIENT); reuse one, or retry in "
        f"{OVER_CAP_RETRY_AFTER_SECONDS} s"
        if caps
        else ""
    )
    attributes = {
        "head_timeout": seconds,
        "caps": caps,
        "open_per_client": Counter(),
        "over_total": over_capacity(_total_detail()),
        "over_per_client": over_capacity(per_client),
    }
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), attributes)
