"""Issue 8.2: clients that never read their answers cannot take the server's memory.

Twelve clients ask for different 512-token SmolLM2 texts (all 30 layers, 71 MB answers each,
every one pinning its forward pass, 37 MB of hidden states, and one layer's replayed maps, 9 MB)
and never read a byte. The in-flight budget (100 MiB here) lets two be sent at once and refuses
the rest with 503 + Retry-After; the two are dropped once they have read nothing for the send
timeout. The server's RSS stays under the stated bound:

    RSS <= RSS with the model loaded + forward cache bound + in-flight bound + working margin
"""

import json
import socket
import threading
import time
import urllib.request

import pytest

from app.memory import worst_case_rss
from tests.support.live import rss_bytes, start_server

pytestmark = pytest.mark.slow

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
MiB = 2**20
CACHE_BYTES = 256 * MiB
INFLIGHT_BYTES = 100 * MiB
SEND_TIMEOUT = 8


def test_stalled_readers_keep_rss_under_the_stated_bound(tmp_path):
    server = start_server(
        tmp_path / "server.log",
        {
            "ATLAS_FORWARD_CACHE_BYTES": str(CACHE_BYTES),
            "ATLAS_INFLIGHT_BYTES": str(INFLIGHT_BYTES),
            "ATLAS_INFLIGHT_WAIT_SECONDS": "3",
            "ATLAS_SEND_TIMEOUT_SECONDS": str(SEND_TIMEOUT),
        },
    )
    sockets = []
    try:
        warm = urllib.request.Request(
            f"{server.base}/api/attention",
            json.dumps({"model": SMOLLM2, "text": "warm up", "layers": [0]}).encode(),
            {"Content-Type": "application/json"},
        )
        urllib.request.urlopen(warm, timeout=120).read()
        ready = rss_bytes(server.process.pid)
        bound = worst_case_rss(ready, CACHE_BYTES, INFLIGHT_BYTES)

        for i in range(12):
            text = f"Client {i} says: " + "the quick brown fox jumps over the lazy dog. " * 49
            data = json.dumps({"model": SMOLLM2, "text": text, "format": "u8"}).encode()
            conn = socket.create_connection(("127.0.0.1", server.port))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.sendall(
                b"POST /api/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(data) + data
            )
            sockets.append(conn)

        peak, samples = 0, []
        stop = threading.Event()

        def sample():
            nonlocal peak
            while not stop.is_set():
                value = rss_bytes(server.process.pid)
                peak = max(peak, value)
                samples.append(value)
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        deadline = time.monotonic() + 90
        while server.log().count("it read nothing for") < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        stop.set()
        sampler.join()

        statuses = []
        for conn in sockets:
            conn.settimeout(2)
            statuses.append(conn.recv(64).split(b"\r\n")[0].decode())
        print(
            f"RSS ready {ready / MiB:.0f} MB, peak {peak / MiB:.0f} MB, bound {bound / MiB:.0f} MB;"
            f" answers: {statuses}"
        )
        assert server.log().count("it read nothing for") >= 2
        assert sum("503" in s for s in statuses) >= 8
        assert sum("200" in s for s in statuses) >= 1
        assert peak <= bound, f"peak {peak / MiB:.0f} MB over the bound {bound / MiB:.0f} MB"
    finally:
        for conn in sockets:
            conn.close()
        server.stop()
