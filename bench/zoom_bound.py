"""Deep zoom's stated bound at a model's whole context: SmolLM2 over 8,192 tokens of each kind
of text, every layer, against transformers' own eager weights.

    .venv/bin/python -m bench.zoom_bound [--tokens 8192] [--cell 128] [--kinds "random words,code"]
        [--layers 0,18,29]

For each kind (tests/support/smollm2_texts.kinds_of_text: random vocabulary words, repeated
text, prose, code): an eager pass a block of query rows at a time, each layer's weights reduced
to cell × cell block maxima as they are made (tests/support/eager_blocks.py: bit for bit a whole
eager pass's weights, without holding a layer's 2.4 GB), then the server's own Deep zoom answer
for each layer (the fused pass, the layer replayed, each row's normaliser summed block by
block, each block's largest weight). Prints the largest difference per layer, the worst, and
the answer's own `error_bound`. Minutes a kind on two cores.
"""

from __future__ import annotations

import argparse
import time

import torch
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.compute import call_on_compute
from atlas_engine.config import Settings
from atlas_engine.models.registry import SMOLLM2_ID
from tests.support.eager_blocks import eager_blocks
from tests.support.smollm2_texts import kinds_of_text


def run(tokens: int, cell: int, kinds: list[str], layers: list[int] | None) -> None:
    app = create_app(Settings(preload=[], rate_limit_per_minute=0))
    with TestClient(app) as client:
        loaded = call_on_compute(app.state.manager.get, SMOLLM2_ID)
        texts = kinds_of_text(tokens)
        chosen = layers if layers is not None else list(range(loaded.arch.num_layers))
        for kind in kinds:
            text = texts[kind]
            start = time.perf_counter()
            reference = call_on_compute(eager_blocks, loaded, text, set(chosen), cell)
            eager_s = time.perf_counter() - start
            start = time.perf_counter()
            gaps, bound = {}, None
            for layer in chosen:
                body = {"model": SMOLLM2_ID, "text": text, "layer": layer, "cell": cell}
                answer = client.post("/api/attention/tiles", json={**body, "reduce": "max"})
                assert answer.status_code == 200, answer.text
                shown = torch.tensor(answer.json()["values"])  # (H, blocks, blocks)
                gaps[layer] = float((shown - reference[layer]).abs().max())
                bound = answer.json()["error_bound"]
            zoom_s = time.perf_counter() - start
            worst = max(gaps, key=gaps.get)
            seq = len(loaded.tokenizer(text)["input_ids"])
            print(f"{kind}, {seq} tokens, cell {cell} (max): largest |zoom - eager| per layer")
            print("  " + " ".join(f"{layer}:{gap:.1e}" for layer, gap in gaps.items()))
            print(
                f"  worst {gaps[worst]:.3g} at layer {worst}: {gaps[worst] / bound:.2f}x the "
                f"answer's error_bound {bound:g}; eager {eager_s:.0f} s, zoom {zoom_s:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--cell", type=int, default=128)
    parser.add_argument("--kinds", default="random words,repeated text,prose,code")
    parser.add_argument("--layers", default=None, help="comma-separated; every layer by default")
    args = parser.parse_args()
    layers = None if args.layers is None else [int(x) for x in args.layers.split(",")]
    run(args.tokens, args.cell, args.kinds.split(","), layers)
