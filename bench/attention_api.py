"""The API against the model's own forward pass, measured side by side in one run.

    .venv/bin/python -m bench.attention_api [--repeats N]

For each model and length, on README prose: the model's own forward pass with attention output
(transformers alone, eager attention, in this process), and a live server started as `make run`
starts it, asked over HTTP on one keep-alive connection, uncompressed (`Accept-Encoding:
identity`), the whole body read:
- every layer and head of a new text (one never sent before) in u8, f32 and, where the JSON
  limit allows, JSON; then the same request again (the forward pass cached);
- one layer of every head in f32 on a new text (the explorer's first request), and again.
Medians of N; each ratio is over the forward pass.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from app.config import Settings
from app.main import create_app
from app.models.registry import MINILM_ID, SMOLLM2_ID
from app.schemas.attention import MAX_JSON_WEIGHTS
from app.serialize import answer_bytes_bound
from bench.compression import prose
from tests.support.live import start_server

MAX_ANSWER_BYTES = 128 * 2**20  # the server's default ATLAS_MAX_ANSWER_BYTES
LENGTHS = {MINILM_ID: (16, 128, 512), SMOLLM2_ID: (16, 128, 512)}
_starts = itertools.count(1)


class Client:
    """POST /api/attention on one keep-alive HTTP connection; times the whole answer."""

    def __init__(self, base: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=600)
        self.idle_since: float | None = None

    def post(self, body: dict) -> tuple[float, bytes]:
        """(milliseconds from sending the request to the answer's last byte, the body)."""
        data = json.dumps(body).encode("utf-8")
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        if self.idle_since is not None and time.monotonic() - self.idle_since > 3:
            self.connection.close()  # uvicorn closes a connection idle for 5 s: open a new one
            self.connection.connect()
        start = time.perf_counter()
        self.connection.request("POST", "/api/attention", body=data, headers=headers)
        response = self.connection.getresponse()
        content = response.read()
        elapsed = (time.perf_counter() - start) * 1000
        self.idle_since = time.monotonic()
        assert response.status == 200, content[:300]
        return elapsed, content


def forward_ms(loaded, text: str, repeats: int) -> tuple[float, int]:
    """(median milliseconds of the model's own forward pass with attention output, tokens)."""
    encoding = loaded.tokenizer(text, return_tensors="pt")
    if loaded.causal:
        encoding.pop("token_type_ids", None)
    samples = []
    with torch.inference_mode():
        loaded.model(**encoding, output_attentions=True)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            loaded.model(**encoding, output_attentions=True)
            samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), encoding["input_ids"].shape[1]


def measure(client: Client, loaded, n: int, repeats: int) -> dict[str, float]:
    """Median milliseconds of each kind of request, each on texts of n MiniLM-length tokens."""
    arch = loaded.arch
    seq = 0
    rows: dict[str, list[float]] = {}

    def text() -> str:
        extra = 2 if loaded.causal else 0  # a decoder adds no [CLS] and [SEP]
        return prose(loaded.tokenizer, n + extra, start=97 * next(_starts))

    for _ in range(repeats):
        for fmt in ("u8", "f32", "json"):
            body = {"model": loaded.id, "text": text(), "format": fmt}
            seq = seq or len(loaded.tokenizer(body["text"])["input_ids"])
            weights = arch.num_layers * arch.num_heads * seq * seq
            too_big = (
                weights > MAX_JSON_WEIGHTS
                if fmt == "json"
                else answer_bytes_bound(fmt, weights, seq) > MAX_ANSWER_BYTES
            )
            if too_big:
                continue
            rows.setdefault(f"{fmt} new", []).append(client.post(body)[0])
            elapsed, content = client.post(body)
            rows.setdefault(f"{fmt} cached", []).append(elapsed)
            rows[f"{fmt} MB"] = [len(content) / 1e6]
        layer = {
            "model": loaded.id,
            "text": text(),
            "format": "f32",
            "layers": [arch.num_layers // 2],
        }
        rows.setdefault("layer new", []).append(client.post(layer)[0])
        rows.setdefault("layer cached", []).append(client.post(layer)[0])
    return {key: statistics.median(values) for key, values in rows.items()}


def cell(values: dict, key: str, forward: float | None = None) -> str:
    if key not in values:
        return f"{'limit':>9}" + ("" if forward is None else f"{'':>7}")
    text = f"{values[key]:>7,.1f}ms"
    return text if forward is None else f"{text} {values[key] / forward:>5.2f}x"


def run(repeats: int) -> None:
    app = create_app(Settings(preload=[]))
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            Path(tmp) / "server.log", {"ATLAS_PRELOAD": json.dumps([MINILM_ID, SMOLLM2_ID])}
        )
        try:
            client = Client(server.base)
            print(f"Medians of {repeats}; 'new' is a text the server has not seen.")
            print(
                f"{'model':<8} {'tokens':>6} {'forward':>9} {'u8 new':>16} {'u8 cached':>9} "
                f"{'f32 new':>16} {'f32 cached':>10} {'layer new':>16} {'layer cached':>12} "
                f"{'JSON new':>16} {'u8 MB':>7}"
            )
            for model_id in LENGTHS:  # both loaded before anything is timed
                app.state.manager.get(model_id)
                client.post({"model": model_id, "text": "warm up", "format": "u8"})
            for model_id, lengths in LENGTHS.items():
                loaded = app.state.manager.get(model_id)
                for n in lengths:
                    text = prose(loaded.tokenizer, n + (2 if loaded.causal else 0))
                    forward, seq = forward_ms(loaded, text, repeats)
                    time.sleep(0.5)  # this process's idle OpenMP threads stop spinning first
                    values = measure(client, loaded, n, repeats)
                    print(
                        f"{model_id.split('/')[-1][:8]:<8} {seq:>6} {forward:>7,.1f}ms "
                        f"{cell(values, 'u8 new', forward)} {cell(values, 'u8 cached')} "
                        f"{cell(values, 'f32 new', forward)} {cell(values, 'f32 cached'):>10} "
                        f"{cell(values, 'layer new', forward)} {cell(values, 'layer cached'):>12} "
                        f"{cell(values, 'json new', forward)} {values['u8 MB']:>7.2f}"
                    )
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    run(parser.parse_args().repeats)
