"""The real server (uvicorn) stays responsive: health answers during long work."""

import json
import threading
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slow

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def post(base, path, body, timeout=120):
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


def test_health_answers_while_a_long_request_runs(live_server):
    post(live_server, "/api/attention", {"model": SMOLLM2, "text": "warm up", "layers": [0]})
    long_text = "Attention is all you need. " * 70  # 420 tokens: about a second of CPU
    finished = {}

    def long_request():
        status, _ = post(
            live_server, "/api/attention", {"model": SMOLLM2, "text": long_text, "format": "u8"}
        )
        finished["status"], finished["at"] = status, time.monotonic()

    worker = threading.Thread(target=long_request)
    worker.start()
    time.sleep(0.15)
    health_times = []
    while worker.is_alive() and len(health_times) < 20:
        with urllib.request.urlopen(f"{live_server}/api/health", timeout=10) as response:
            assert json.loads(response.read()) == {"status": "ok"}
        health_times.append(time.monotonic())
    worker.join()
    assert finished["status"] == 200
    # Health checks were answered while the forward pass was still running.
    assert health_times and health_times[0] < finished["at"]
