"""Overload answers 503 at once, never a hang (issue 38): long jobs past what the compute lane
lets wait are refused with Retry-After while the server keeps answering."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.support.live import start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.alone]
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def post(base, path, body, timeout=120):
    request = urllib.request.Request(
        f"{base}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    return urllib.request.urlopen(request, timeout=timeout)


def test_long_jobs_past_the_queues_bound_get_503_at_once(tmp_path):
    from transformers import AutoTokenizer

    from atlas_engine.models.sources import smollm2_folder
    from bench.compression import prose
    from tests.conftest import CACHE_DIR

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder(CACHE_DIR, print))
    texts = [prose(tokenizer, 2000 + i) for i in range(4)]  # four distinct long passes
    server = start_server(tmp_path / "server.log", {"ATLAS_QUEUE_HEAVY_SECONDS": "10"})
    try:
        post(server.base, "/api/attention", {"model": SMOLLM2, "text": "warm up", "layers": [0]})
        first = post(server.base, "/api/attention/forward", {"model": SMOLLM2, "text": texts[0]})
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(json.loads(x) for x in first))
        reader.start()
        while not lines:  # the first pass is under way on the lane
            assert reader.is_alive()
            time.sleep(0.01)
        answers = []

        def send(text):
            started = time.monotonic()
            try:
                post(server.base, "/api/attention/forward", {"model": SMOLLM2, "text": text}).read()
                answers.append((200, time.monotonic() - started, None))
            except urllib.error.HTTPError as err:
                retry = err.headers.get("Retry-After")
                answers.append((err.code, time.monotonic() - started, retry))

        senders = [threading.Thread(target=send, args=(text,)) for text in texts[1:]]
        for sender in senders:
            sender.start()
            time.sleep(0.2)  # in this order
        for sender in senders:
            sender.join(120)
        reader.join(120)
        refused = [a for a in answers if a[0] == 503]
        assert len(refused) >= 2, answers  # about 7 s of work waiting: no room for a third
        assert all(seconds < 2 and int(retry) >= 1 for _, seconds, retry in refused), refused
        assert lines[-1]["event"] == "done"
        assert urllib.request.urlopen(f"{server.base}/api/health", timeout=5).status == 200
    finally:
        server.stop()
