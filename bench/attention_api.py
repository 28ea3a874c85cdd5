"""Forward time vs API time, and JSON vs binary sizes, measured side by side in one run.

    .venv/bin/python -m bench.attention_api [--repeats N]

For each model and length: the model's own forward pass with attention output (direct, no app
code), the API's answer on a new text (tokenize + forward + replay + serialise) and on a cached
text, for JSON and u8 (every layer and head), and one layer of every head in u8 asked again.
Answers are asked for uncompressed (accept-encoding: identity), through FastAPI's test client,
which adds a few milliseconds a megabyte of its own.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.models.registry import MINILM_ID, SMOLLM2_ID
from app.schemas.attention import MAX_JSON_WEIGHTS

WORDS = "the quick brown fox jumps over a lazy dog while seven bright stars watch quietly".split()  # noqa: SIM905


def text_of(n_tokens: int, salt: int) -> str:
    """A text that MiniLM tokenizes to exactly n_tokens tokens (with [CLS] and [SEP])."""
    words = [WORDS[(i + salt) % len(WORDS)] for i in range(n_tokens - 2)]
    return " ".join(words)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed_post(client, body) -> tuple[float, bytes]:
    start = time.perf_counter()
    response = client.post("/api/attention", json=body, headers={"accept-encoding": "identity"})
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.text
    return elapsed, response.content


def run(repeats: int) -> None:
    app = create_app(Settings(preload=[]))
    with TestClient(app) as client:
        print(
            "Medians over", repeats, "runs; 'new' = a text not seen before, all layers and heads."
        )
        print(
            f"{'model':<38} {'tokens':>6} {'forward':>9} {'JSON new':>9} {'JSON hit':>9} "
            f"{'u8 new':>9} {'u8/fwd':>6} {'u8 hit':>8} {'layer hit':>9} {'JSON/fwd':>8} "
            f"{'JSON MB':>8} {'u8 MB':>7} {'size':>6}"
        )
        for model_id in (MINILM_ID, SMOLLM2_ID):
            loaded = app.state.manager.get(model_id)
            for n in (16, 128, 512):
                text = text_of(n, 0)
                enc = loaded.tokenizer(text, return_tensors="pt")
                seq = enc["input_ids"].shape[1]
                if loaded.causal:
                    enc.pop("token_type_ids", None)
                forward = []
                with torch.inference_mode():
                    loaded.model(**enc, output_attentions=True)  # warm-up
                    for _ in range(repeats):
                        start = time.perf_counter()
                        loaded.model(**enc, output_attentions=True)
                        forward.append(time.perf_counter() - start)
                weights = loaded.arch.num_layers * loaded.arch.num_heads * seq * seq
                with_json = weights <= MAX_JSON_WEIGHTS
                rows = {"json_new": [], "json_hit": [], "u8_new": [], "u8_hit": [], "layer": []}
                json_size = u8_size = 0
                for r in range(repeats):
                    for fmt in ("json", "u8") if with_json else ("u8",):
                        body = {
                            "model": model_id,
                            "text": text_of(n, 100 * r + len(fmt)),
                            "format": fmt,
                        }
                        elapsed, content = timed_post(client, body)
                        rows[f"{fmt}_new"].append(elapsed)
                        elapsed, content = timed_post(client, body)
                        rows[f"{fmt}_hit"].append(elapsed)
                        if fmt == "u8":  # one layer, asked again (replayed once, then memoised)
                            timed_post(client, {**body, "layers": [1]})
                            rows["layer"].append(timed_post(client, {**body, "layers": [1]})[0])
                        if fmt == "json":
                            json_size = len(content)
                        else:
                            u8_size = len(content)

                def cell(key: str, width: int, rows=rows) -> str:
                    return (
                        f"{median_ms(rows[key]):>{width - 2}.1f}ms"
                        if rows[key]
                        else f"{'—':>{width}}"
                    )

                ratio = (
                    f"{median_ms(rows['json_new']) / median_ms(forward):>7.1f}x"
                    if with_json
                    else f"{'—':>8}"
                )
                json_mb = f"{json_size / 1e6:>8.2f}" if with_json else f"{'limit':>8}"
                size_ratio = f"{json_size / u8_size:>5.1f}x" if with_json else f"{'—':>6}"
                print(
                    f"{model_id:<38} {seq:>6} {median_ms(forward):>7.1f}ms {cell('json_new', 9)} "
                    f"{cell('json_hit', 9)} {cell('u8_new', 9)} "
                    f"{median_ms(rows['u8_new']) / median_ms(forward):>5.2f}x {cell('u8_hit', 8)} "
                    f"{cell('layer', 9)} {ratio} "
                    f"{json_mb} {u8_size / 1e6:>7.2f} {size_ratio}"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    run(parser.parse_args().repeats)
