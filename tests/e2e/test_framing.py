"""A request with both Content-Length and Transfer-Encoding is refused and its connection closed
(app.framing), on the real server: h11 let Transfer-Encoding win, where a proxy in front may
believe the Content-Length, and the two would split the stream into different requests."""

import json
import socket

import pytest

pytestmark = pytest.mark.slow


def read_until_closed(conn: socket.socket) -> bytes:
    answer = b""
    while chunk := conn.recv(4096):
        answer += chunk
    return answer


def test_content_length_with_transfer_encoding_gets_400_and_the_connection_closes(live_server):
    host, port = live_server.removeprefix("http://").split(":")
    body = json.dumps({"n": 3}).encode()
    smuggled = b"GET /api/models HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            b"POST /api/lab/masks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body)
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            + smuggled
        )
        answer = read_until_closed(conn)  # the server closes it: nothing more is read
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(rest)["code"] == "invalid_body"
    assert b"Content-Length and Transfer-Encoding" in rest
    assert answer.count(b"HTTP/1.1") == 1  # the request after it was never answered
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")
