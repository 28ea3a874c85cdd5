"""A reference for Deep zoom: a whole pass with the model's own eager attention, its maps reduced
to cell × cell block maxima as they are made, so a layer at 8,192 tokens never holds its
2.4 GB of weights at once.

Each layer runs as eager attention on `cell` query rows at a time against every key: the same
arithmetic as transformers' eager function on the whole layer, row by row, and bit for bit the
same weights (tests/atlas_engine/test_zoom_bound.py holds that against a whole eager pass). A
pass of SmolLM2 over 8,192 tokens takes minutes on two cores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from atlas_engine.inference.forward import tokenize
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel


class _Blocks(capture.Recorder):
    """Every layer in blocks of `cell` query rows (or whole, `whole`), the kept layers'
    weights reduced to block maxima."""

    def __init__(self, layers, keep: set[int], cell: int, whole: bool) -> None:
        super().__init__()
        self.index = {id(module): i for i, module in enumerate(layers)}
        self.keep, self.cell, self.whole = keep, cell, whole
        self.blocks: dict[int, Tensor] = {}

    def on_call(self, module, q, k, v, mask, kw):
        if mask is not None and mask.dtype == torch.bool:  # eager's additive form
            mask = torch.where(mask, 0.0, torch.finfo(q.dtype).min).to(q.dtype)
        eager = capture.eager_of(module)
        layer = self.index[id(module)]
        step = q.shape[2] if self.whole else self.cell
        outs, rows = [], []
        for r0 in range(0, q.shape[2], step):
            part = None if mask is None else mask[:, :, r0 : r0 + step]
            out, weights = eager(module, q[:, :, r0 : r0 + step], k, v, part, **kw)
            outs.append(out)  # (1, rows, heads, head_dim)
            if layer in self.keep:  # weights (1, H, rows, T) -> (H, rows / cell, blocks)
                rows.append(F.max_pool2d(weights[0], self.cell, self.cell, ceil_mode=True))
        if rows:
            self.blocks[layer] = torch.cat(rows, 1)
        return torch.cat(outs, 1), None


def eager_blocks(
    loaded: LoadedModel, text: str, layers: set[int], cell: int, whole: bool = False
) -> dict[int, Tensor]:
    """{layer: (heads, blocks, blocks) float32}: each cell × cell block's largest weight of an
    eager pass over `text` (whole=True: each layer's weights at once, as transformers makes
    them; only for short texts)."""
    inputs, _ = tokenize(loaded, text, None)
    recorder = _Blocks(loaded.attention_layers, layers, cell, whole)
    with torch.inference_mode(), capture.recording(recorder):
        loaded.model(**inputs)
    return recorder.blocks
