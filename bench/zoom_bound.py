"""Deep zoom's stated bound at a model's whole context: SmolLM2 over 8,192 tokens.

    .venv/bin/python -m bench.zoom_bound [--tokens 8192] [--layer 18] [--cell 128]

One eager pass over the text (every layer's maps computed and dropped, as `output_attentions`
would make them, but only the chosen layer's kept: 2.4 GB), then the server's own Deep zoom
answer for that layer (the fused pass, the layer replayed, each row's normaliser summed block
by block, each cell × cell block's largest weight). Prints the largest difference over every
head and block against the same blocks of the eager maps, the number of blocks past the stated
bound, and the worst block. Minutes on two cores; several GB of memory.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.compute import call_on_compute
from atlas_engine.config import Settings
from atlas_engine.inference.forward import tokenize
from atlas_engine.models import capture
from atlas_engine.models.placement import REPLAY_MAX_ABS_DIFF
from atlas_engine.models.registry import SMOLLM2_ID
from bench.compression import prose


class _KeepOneLayer(capture.Recorder):
    """Eager attention everywhere, the chosen layer's weights kept."""

    def __init__(self, module) -> None:
        super().__init__()
        self.module = module
        self.kept = None

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        if module is self.module:
            self.kept = weights[0].to("cpu", torch.float32)
        return out, None


def eager_layer(loaded, text: str, layer: int) -> torch.Tensor:
    inputs, _ = tokenize(loaded, text, None)
    keeper = _KeepOneLayer(loaded.attention_layers[layer])
    with torch.inference_mode(), capture.recording(keeper):
        loaded.model(**inputs)
    return keeper.kept  # (H, T, T)


def run(tokens: int, layer: int, cell: int) -> None:
    app = create_app(Settings(preload=[], rate_limit_per_minute=0))
    with TestClient(app) as client:
        loaded = call_on_compute(app.state.manager.get, SMOLLM2_ID)
        text = prose(loaded.tokenizer, tokens + 2)
        start = time.perf_counter()
        body = {"model": SMOLLM2_ID, "text": text, "layer": layer, "cell": cell, "reduce": "max"}
        answer = client.post("/api/attention/tiles", json=body)
        assert answer.status_code == 200, answer.text
        shown = torch.tensor(answer.json()["values"])  # (H, blocks, blocks)
        zoom_s = time.perf_counter() - start
        start = time.perf_counter()
        eager = call_on_compute(eager_layer, loaded, text, layer)
        eager_s = time.perf_counter() - start
    expected = F.max_pool2d(eager, cell, cell, ceil_mode=True)
    gap = (shown - expected).abs()
    bound = REPLAY_MAX_ABS_DIFF["float32"]
    worst = divmod(int(gap.argmax()), gap.shape[-1] * gap.shape[-2])
    head, rest = worst
    print(
        f"SmolLM2, {eager.shape[-1]} tokens, layer {layer}, cell {cell} (max): "
        f"{gap.numel():,} blocks, largest |zoom - eager| {gap.max():.3g} "
        f"(head {head}, block {divmod(rest, gap.shape[-1])}), "
        f"{int((gap > bound).sum())} past the bound {bound:g}, "
        f"{float(gap.max()) / bound:.2f}x the bound; zoom {zoom_s:.0f} s, eager {eager_s:.0f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--layer", type=int, default=18)
    parser.add_argument("--cell", type=int, default=128)
    args = parser.parse_args()
    run(args.tokens, args.layer, args.cell)
