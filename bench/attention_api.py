"""The API against the model's own forward pass, measured side by side in one run.

    .venv/bin/python -m bench.attention_api [--repeats N]

For each model and length, on README prose: the model's own forward pass with attention output
(transformers alone, eager attention, in this process), and a live server started as `make run`
starts it, asked over HTTP on one keep-alive connection, uncompressed (`Accept-Encoding:
identity`), the whole body read. Each request is on a new text (one never sent before), timed
right after the bare pass on that same text, then sent again (the pass cached): every layer and
head in u8, f32 and, where the JSON limit allows, JSON; and one layer of every head in f32 (the
explorer's first request). Medians of N (3N where the pass is estimated under SHORT_PASS_SECONDS,
whose timings scatter most); each ratio is the median of the pairs' ratios. Then, for the new
answers of every layer in u8, where the server says their time went (its Server-Timing header).
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

from app import timing
from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.forward import ForwardResult, tokenize
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.attention import MAX_JSON_WEIGHTS
from atlas_engine.serialize import answer_bytes_bound
from attention_atlas.client import server_timing
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
        self.stages: dict[str, float] = {}  # the last answer's Server-Timing, milliseconds

    def post(self, body: dict) -> tuple[float, bytes]:
        """(milliseconds from sending the request to the answer's last byte, the body); the
        server's own account of the time (its Server-Timing header) is left in self.stages."""
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
        self.stages = server_timing(response.getheader(timing.HEADER, ""))
        return elapsed, content


def forward_ms(loaded, text: str) -> tuple[float, int]:
    """(milliseconds of the model's own forward pass with attention output, tokens)."""
    encoding, _ = tokenize(loaded, text, None)  # the inputs the model's forward takes
    with torch.inference_mode():
        start = time.perf_counter()
        loaded.model(**encoding, output_attentions=True)
        elapsed = (time.perf_counter() - start) * 1000
    time.sleep(0.05)  # this process's OpenMP threads spin a while after a kernel: let them rest
    return elapsed, encoding["input_ids"].shape[1]


SHORT_PASS_SECONDS = 0.05
"""Passes estimated shorter than this (ForwardResult.seconds_for) are timed three times as often:
a pass of a few milliseconds moves most with this machine's wake-ups (docs/performance.md)."""

KINDS = ("u8", "f32", "layer", "json")  # every layer in each format; one f32 layer


def measure(client: Client, loaded, n: int, repeats: int) -> dict[str, float]:
    """Medians over `repeats` new texts of n MiniLM-length tokens for each kind of request:
    the bare forward pass on the text, the API's answer on it (new), the same again (cached),
    and the ratio of each new answer to the bare pass on the same text, just before it (the
    pairs cancel the drift of a machine's speed between them)."""
    arch = loaded.arch
    rows: dict[str, list[float]] = {}
    extra = 2 if loaded.causal else 0  # a decoder adds no [CLS] and [SEP]
    forward_ms(loaded, prose(loaded.tokenizer, n + extra))  # warm-up at this length
    for _ in range(repeats):
        for kind in KINDS:
            text = prose(loaded.tokenizer, n + extra, start=97 * next(_starts))
            fmt = "f32" if kind == "layer" else kind
            body = {"model": loaded.id, "text": text, "format": fmt}
            if kind == "layer":
                body["layers"] = [arch.num_layers // 2]
            forward, seq = forward_ms(loaded, text)
            layers = 1 if kind == "layer" else arch.num_layers
            weights = layers * arch.num_heads * seq * seq
            if (
                weights > MAX_JSON_WEIGHTS
                if fmt == "json"
                else answer_bytes_bound(fmt, weights, seq) > MAX_ANSWER_BYTES
            ):
                continue  # refused: over the answer limits
            rows.setdefault("forward", []).append(forward)
            rows.setdefault("tokens", []).append(seq)
            new, _ = client.post(body)
            if kind == "u8":
                for stage, ms in where_it_went(new, client.stages).items():
                    rows.setdefault(f"u8 {stage}", []).append(ms)
            cached, content = client.post(body)
            rows.setdefault(f"{kind} new", []).append(new)
            rows.setdefault(f"{kind} ratio", []).append(new / forward)
            rows.setdefault(f"{kind} cached", []).append(cached)
            rows[f"{kind} MB"] = [len(content) / 1e6]
    return {key: statistics.median(values) for key, values in rows.items()}


def where_it_went(total: float, stages: dict[str, float]) -> dict[str, float]:
    """A new answer's milliseconds by where the server says they went (its Server-Timing): on
    the compute lanes the pass, tokenising and the rest (sizing, the cache, coding the answer),
    the wait for a lane, the event loop (reading and checking the request, routing, the hops to
    and from the lanes), and outside the app: before it (the request sent and its head parsed)
    and after the answer's head (the body coded where it is streamed, sent and read)."""
    forward, tokenize = stages.get("forward", 0.0), stages.get("tokenize", 0.0)
    return {
        "forward": forward,
        "tokenize": tokenize,
        "rest of compute": stages["compute"] - forward - tokenize,
        "queue": stages["queue"],
        "event loop": stages["app"] - stages["queue"] - stages["compute"],
        "outside the app": total - stages["app"],
    }


BREAKDOWN = ("forward", "tokenize", "rest of compute", "queue", "event loop", "outside the app")


def cell(values: dict, kind: str) -> str:
    """'new (ratio) cached' for one kind of request, or 'limit' where the API refuses it."""
    if f"{kind} new" not in values:
        return f"{'limit':>25}"
    return (
        f"{values[f'{kind} new']:>8,.1f} {values[f'{kind} ratio']:>5.2f}x "
        f"{values[f'{kind} cached']:>8,.1f}"
    )


def print_breakdown(measured: list[tuple[str, dict]]) -> None:
    """Where the new answers of every layer in u8 spent their time (where_it_went), medians."""
    print(
        "\nA new answer of every layer in u8, by the server's Server-Timing (medians, ms; the "
        "bare pass and the whole answer as above):"
    )
    print(
        f"{'model':<8} {'tokens':>6} {'bare':>7} {'answer':>7} "
        + " ".join(f"{stage:>15}" for stage in BREAKDOWN)
    )
    for model_id, values in measured:
        print(
            f"{model_id.split('/')[-1][:8]:<8} {values['tokens']:>6.0f} "
            f"{values['forward']:>7,.1f} {values['u8 new']:>7,.1f} "
            + " ".join(f"{values[f'u8 {stage}']:>15,.2f}" for stage in BREAKDOWN)
        )


def run(repeats: int) -> None:
    app = create_app(Settings(preload=[]))
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            Path(tmp) / "server.log", {"ATLAS_PRELOAD": json.dumps([MINILM_ID, SMOLLM2_ID])}
        )
        try:
            client = Client(server.base)
            print(
                f"Medians of {repeats} ({3 * repeats} where a pass takes under 50 ms); ms. "
                "'new': a text the server has not seen; 'x': the new answer over the bare "
                "forward pass on the same text just before it; then the same request again "
                "(cached)."
            )
            print(
                f"{'model':<8} {'tokens':>6} {'forward':>8} {'all layers, u8':>25} "
                f"{'all layers, f32':>25} {'one layer, f32':>25} {'all layers, JSON':>25} "
                f"{'u8 MB':>6}"
            )
            for model_id in LENGTHS:  # both loaded before anything is timed
                app.state.manager.get(model_id)
                client.post({"model": model_id, "text": "warm up", "format": "u8"})
            measured = []
            for model_id, lengths in LENGTHS.items():
                loaded = app.state.manager.get(model_id)
                for n in lengths:
                    short = ForwardResult.seconds_for(loaded.arch, n) < SHORT_PASS_SECONDS
                    values = measure(client, loaded, n, repeats * (3 if short else 1))
                    measured.append((model_id, values))
                    print(
                        f"{model_id.split('/')[-1][:8]:<8} {values['tokens']:>6.0f} "
                        f"{values['forward']:>8,.1f} {cell(values, 'u8')} {cell(values, 'f32')} "
                        f"{cell(values, 'layer')} {cell(values, 'json')} {values['u8 MB']:>6.2f}"
                    )
            print_breakdown(measured)
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    run(parser.parse_args().repeats)
