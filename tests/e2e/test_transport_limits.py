"""Issue 8.2: a request body that never finishes is cut off (408), on the real server."""

import socket
import time

import pytest

from tests.support.live import start_server

pytestmark = pytest.mark.slow


def test_a_body_that_never_finishes_gets_408(tmp_path):
    server = start_server(tmp_path / "server.log", {"ATLAS_BODY_TIMEOUT_SECONDS": "1"})
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
            conn.sendall(
                b"POST /api/core/attention HTTP/1.1\r\nHost: x\r\n"
                b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"q": [[1'
            )
            started = time.monotonic()
            answer = conn.recv(4096)
            waited = time.monotonic() - started
            while b"body_timeout" not in answer:  # the body may come in a later segment
                more = conn.recv(4096)
                if not more:
                    break
                answer += more
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b'"code":"body_timeout"' in answer.replace(b" ", b"")
        assert 0.9 < waited < 5
    finally:
        server.stop()
