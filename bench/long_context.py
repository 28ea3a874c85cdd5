"""Long contexts on the server, measured side by side in one run: SmolLM2 at 512, 2,048 and 8,192
tokens (its whole context).

    .venv/bin/python -m bench.long_context [--lengths 512,2048,8192]

For each length: the model's bare forward pass (no attention output, PyTorch's fused kernel
above the eager size, as the server runs it), the API's forward pass (POST /api/attention/forward,
which also keeps the hidden states), then windows of the cached pass (POST /api/attention/tiles):
an overview of one head and of all 9 heads of a layer at about 340 cells across, and a 64 x 64
window of single weights at the end of the text; and one layer of maps in u8 where the API
computes one (up to 2,181 tokens); and every head statistic of one layer (POST
/api/attention/heads, computed a block of query rows at a time), then, with those kept, each
head's share of attention on 16 marked tokens a quarter into the text, read from the last token
(one row) and over every later row. The process's RSS after each
length and its peak are the server's memory: the bench runs the app in process. Last, the
fitted exponent of each against the tokens (bench.scaling's least-squares slope).
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from pathlib import Path

import torch
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.compute import call_on_compute
from atlas_engine.config import Settings
from atlas_engine.inference.forward import ForwardResult, pass_kernel
from atlas_engine.models.capture import implementation
from atlas_engine.models.registry import SMOLLM2_ID
from bench.compression import prose
from bench.scaling import slope


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, *args, **kwargs):
    """(milliseconds, fn's value); an HTTP answer must be a success."""
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    elapsed = (time.perf_counter() - start) * 1000
    status = getattr(value, "status_code", 200)
    assert status == 200, value.text
    return elapsed, value


def bare_pass(loaded, ids, kernel: str):
    """(milliseconds, output) of the model alone with the kernel the server picks."""
    with (
        torch.inference_mode(),
        implementation(loaded.model, "sdpa" if kernel == "sdpa" else "eager"),
    ):
        return timed(loaded.model, input_ids=ids)


def run(lengths: list[int]) -> None:
    app = create_app(Settings(preload=[]))
    with TestClient(app) as client:
        loaded = call_on_compute(app.state.manager.get, SMOLLM2_ID)  # loads on that thread
        print(
            f"SmolLM2-135M on {torch.get_num_threads()} threads; RSS with the model {rss_mb():,.0f} MB"
        )
        print(
            f"{'tokens':>6} {'kernel':>6} {'bare fwd':>9} {'API fwd':>9} {'ratio':>5} "
            f"{'1 head':>8} {'9 heads':>8} {'64x64':>7} {'layer u8':>9} {'hit':>7} {'stats':>8} "
            f"{'mark·1':>8} {'mark·all':>8} {'pass MB':>7} {'RSS MB':>7} {'peak MB':>7}"
        )
        fits: dict[str, list[float]] = {
            "tokens": [], "API pass": [], "bare pass": [], "pass bytes": [], "overview": [],
            "statistics of a layer": [], "marked, the last row": [], "marked, every later row": [],
        }  # fmt: skip
        for n in lengths:
            text = prose(loaded.tokenizer, n + 2)  # SmolLM2 adds no special tokens
            ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"]
            seq = ids.shape[1]
            kernel = pass_kernel(loaded, seq)
            bare, _ = call_on_compute(bare_pass, loaded, ids, kernel)  # where the app's runs
            body = {"model": SMOLLM2_ID, "text": text}
            api, response = timed(client.post, "/api/attention/forward", json=body)
            done = [line for line in response.text.splitlines() if line][-1]
            assert '"done"' in done, done
            cell = math.ceil(seq / 340)  # 9 heads x 340 x 340 values fit one answer
            overview = {**body, "layer": 15, "cell": cell}
            one, _ = timed(client.post, "/api/attention/tiles", json={**overview, "heads": [0]})
            nine, _ = timed(client.post, "/api/attention/tiles", json=overview)
            window = {
                **body,
                "layer": 15,
                "heads": [0],
                "rows": [seq - 64, seq],
                "cols": [seq - 64, seq],
            }
            small, _ = timed(client.post, "/api/attention/tiles", json=window)
            layer_body = {**body, "layers": [15], "format": "u8"}
            layer = hit = float("nan")
            if (
                client.post("/api/attention", json={**layer_body, "layers": [14]}).status_code
                == 200
            ):
                layer, _ = timed(client.post, "/api/attention", json=layer_body)
                hit, _ = timed(client.post, "/api/attention", json=layer_body)
            statistics, answer = timed(
                client.post, "/api/attention/heads", json={**body, "layers": [15]}
            )
            assert answer.status_code == 200, answer.text
            marked = {**body, "layers": [15], "marked": list(range(seq // 4, seq // 4 + 16))}
            last, _ = timed(
                client.post, "/api/attention/heads", json={**marked, "read_from": [seq - 1]}
            )
            later, _ = timed(client.post, "/api/attention/heads", json=marked)
            kept = app.state.forward_cache.nbytes / 2**20
            for name, value in (
                ("tokens", seq), ("API pass", api), ("bare pass", bare), ("overview", one),
                ("pass bytes", ForwardResult.nbytes_for(loaded.arch, seq, replayed=True)),
                ("statistics of a layer", statistics), ("marked, the last row", last),
                ("marked, every later row", later),
            ):  # fmt: skip
                fits[name].append(value)
            print(
                f"{seq:>6} {kernel:>6} {bare:>7,.0f}ms {api:>7,.0f}ms {api / bare:>5.2f} "
                f"{one:>6,.0f}ms {nine:>6,.0f}ms {small:>5,.0f}ms {layer:>7,.0f}ms {hit:>5,.0f}ms "
                f"{statistics:>6,.0f}ms {last:>6,.0f}ms {later:>6,.0f}ms "
                f"{kept:>7,.0f} {rss_mb():>7,.0f} {peak_mb():>7,.0f}"
            )
        print(
            "'layer u8': one layer's maps in u8 (its first request replays the layer; the pass was "
            "cached by /forward); 'hit': the same again; nan where the API refuses a whole layer; "
            "'stats': every head statistic of one layer (/heads, a block of query rows at a time); "
            "'mark·1' and 'mark·all': then, the statistics kept, each head's share on 16 marked "
            "tokens read from the last token (one row) and over every later row."
        )
        if len(fits["tokens"]) > 1:
            print("Fitted exponents (slope of log against log tokens; 1 linear, 2 quadratic):")
            for name, values in fits.items():
                if name != "tokens":
                    print(f"  {name}: n^{slope(fits['tokens'], values):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="512,2048,8192")
    args = parser.parse_args()
    run([int(n) for n in args.lengths.split(",")])


if __name__ == "__main__":
    main()
