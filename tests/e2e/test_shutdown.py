"""SIGTERM stops the real server within ATLAS_SHUTDOWN_GRACE_SECONDS, even in a long pass."""

import http.client
import json
import signal
import time

import pytest

from atlas_engine.config import Settings
from tests.support.live import start_server

pytestmark = [pytest.mark.slow, pytest.mark.alone]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
GRACE = Settings.model_fields["shutdown_grace_seconds"].default
JSON = {"Content-Type": "application/json"}


def long_text(n_tokens: int) -> str:
    from transformers import AutoTokenizer

    from atlas_engine.models.sources import smollm2_folder
    from bench.compression import prose
    from tests.conftest import CACHE_DIR

    return prose(AutoTokenizer.from_pretrained(smollm2_folder(CACHE_DIR, print)), n_tokens)


def test_sigterm_in_a_long_pass_stops_it_and_exits_within_the_grace(tmp_path):
    """uvicorn waited for every open connection, however long its work ran: an 8,192-token
    /forward kept a SIGTERMed server up for 96 s, past Kubernetes' 30 s. Now its pass stops at
    the next layer with a 503 line, and the server exits well within the grace."""
    text = long_text(6000)  # a pass of tens of seconds on two cores
    server = start_server(tmp_path / "server.log")
    warm = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        body = {"model": SMOLLM2, "text": "warm up", "layers": [0]}
        warm.request("POST", "/api/attention", json.dumps(body), JSON)
        assert warm.getresponse().status == 200  # the model is loaded: the pass starts at once
        conn.request(
            "POST", "/api/attention/forward", json.dumps({"model": SMOLLM2, "text": text}), JSON
        )
        stream = conn.getresponse()
        assert stream.status == 200
        lines = []
        while not any(line.get("layer", 0) >= 2 for line in lines):  # the pass is under way
            lines.append(json.loads(stream.readline()))
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        rest = stream.read()  # IncompleteRead if the connection were cut mid-answer
        server.process.wait(GRACE + 10)
        exited = time.monotonic() - sent
    finally:
        warm.close()
        conn.close()
        server.stop()
    print(f"exited {exited:.2f} s after SIGTERM (grace {GRACE:g} s)")
    last = json.loads(rest.splitlines()[-1])
    assert last["event"] == "error" and last["status"] == 503, last
    assert "shutting down" in last["detail"]
    assert exited < GRACE, server.log()[-2000:]


def test_sigterm_in_exact_patching_stops_it_with_a_503_line_within_the_grace(tmp_path):
    """Issue 50: on SIGTERM a 64-token exact patching run used the whole grace (21.8 s) and its
    client saw a cut stream: its loop never looked. Now it stops before its next batched
    rerun, and its stream ends with the 503 line /forward's does."""
    from tests.support.smollm2_texts import patching_pair

    clean, corrupted = patching_pair(64)
    server = start_server(tmp_path / "server.log")
    warm = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        body = {"model": SMOLLM2, "text": "warm up", "layers": [0]}
        warm.request("POST", "/api/attention", json.dumps(body), JSON)
        assert warm.getresponse().status == 200  # the model is loaded: the run starts at once
        body = {"model": SMOLLM2, "text": clean, "corrupted": corrupted, "components": "both"}
        conn.request("POST", "/api/attention/patching/exact", json.dumps(body), JSON)
        stream = conn.getresponse()
        assert stream.status == 200
        lines = []
        while not any(line.get("layer", 0) >= 2 for line in lines):  # the run is under way
            lines.append(json.loads(stream.readline()))
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        rest = stream.read()  # IncompleteRead if the connection were cut mid-answer
        server.process.wait(GRACE + 10)
        exited = time.monotonic() - sent
    finally:
        warm.close()
        conn.close()
        server.stop()
    print(f"exact patching: exited {exited:.2f} s after SIGTERM (grace {GRACE:g} s)")
    last = json.loads(rest.splitlines()[-1])
    assert last["event"] == "error" and last["status"] == 503, last
    assert "shutting down" in last["detail"]
    assert exited < GRACE / 2, server.log()[-2000:]
