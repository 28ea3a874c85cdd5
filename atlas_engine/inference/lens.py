"""The logit lens: the residual stream after each layer read as if it were the last.

Row 0 is what enters the first layer (the embeddings), row l + 1 what layer l hands on; each is
put through the model's final norm and its language-model head (the modules themselves, so the
last row is exactly the model's own logits) and kept as a small table: each position's top-k and
one chosen token's probability and rank. A probability is exp(logit - logsumexp), the sum over
the whole vocabulary accumulated in float64 (logsumexp64: float32's own softmax over 49,152
logits is up to 2.2e-5 off). Every row's positions go through the head together, LENS_ROWS at
a time (the head's weights are read once per batch, not once per layer), or fewer where the
vocabulary is large (lm_head.head_rows: 32 for Gemma 3's), so logits over the vocabulary are
never held for more than one block of positions; between two blocks the lens stops if its
client has gone and lets short jobs run (`step`).

What it costs: each row is the whole unembedding, (layers + 1) · vocab · d_model
multiply-adds a position, 6.5 times SmolLM2's whole forward pass by count; bench/writes_cost.py
measures it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.inference.residual import Stream, layout_of
from atlas_engine.models.lm_head import head_logits, head_rows
from atlas_engine.models.loader import LoadedModel

LENS_ROWS = 128
"""Positions read through the head at once at most (head_rows may take fewer)."""
LENS_BYTES_PER_LOGIT = 8
"""What a block holds for each logit: the float32 logits and their exponentials (logsumexp64);
the comparison that ranks the chosen token (1 byte) comes after those are freed."""


@dataclass(frozen=True)
class LensGrid:
    """(rows = layers + 1, positions, ...), on the host; rows[0] is the embeddings."""

    ids: Tensor  # (rows, P, k) int64, most likely first
    probs: Tensor  # (rows, P, k) float32
    chosen_prob: Tensor | None  # (rows, P) float32: the chosen token's probability
    chosen_rank: Tensor | None  # (rows, P) int64: 1 for the most likely token


SUM_BLOCK = 1024

LENS_MAX_ABS_DIFF = 1e-6
"""Every row's probabilities against the exact (float64) softmax of that row's logits, as the
model's own final norm and head compute them in its dtype: logsumexp64's relative error on the
normaliser (under 1e-6) is the only rounding between the two. The last row's logits are the
model's own; an inner row's are what the same modules give for the stream after that layer.
A lens computed wholly in float64 (norm and head too) differs by the head's own float32
rounding of the logits, a different number (docs/faithful-numbers.md)."""


def logsumexp64(logits: Tensor, top: Tensor) -> Tensor:
    """log Σ exp(logits) over the last dimension, (n, vocab) -> (n,) float64, given each row's
    maximum `top` (n, 1): every exp in the logits' own dtype after subtracting it (so at most
    1), summed SUM_BLOCK at a time in that dtype and the blocks' sums in float64 (a relative
    error under 1e-6, tests/atlas_engine/inference/test_residual.py; a float64 sum of every term
    costs twice as much)."""
    terms = (logits - top).exp_()
    n, vocab = terms.shape
    if vocab % SUM_BLOCK == 0:
        terms = terms.view(n, vocab // SUM_BLOCK, SUM_BLOCK).sum(dim=-1)
    return top[:, 0].double() + terms.sum(dim=-1, dtype=torch.float64).log()


def logit_lens(
    loaded: LoadedModel,
    stream: Stream,
    positions: list[int],
    k: int,
    chosen: int | None,
    step: Callable[[], None] | None = None,
) -> LensGrid:
    """The lens over `positions` of a pass taken apart (batch 1): see the module docstring.
    step: called between two blocks of positions (atlas_engine.compute.between_steps: raises
    to stop the lens)."""
    norm = layout_of(loaded).final_norm
    at = torch.tensor(positions, device=stream.last_hidden.device)
    rows = torch.stack([x[0].index_select(0, at) for x in (stream.inputs[0], *stream.outputs)])
    shape = rows.shape[:2]  # (layers + 1, P)
    flat = rows.reshape(-1, rows.shape[-1])  # (rows · P, d)
    parts: dict[str, list[Tensor]] = {"ids": [], "probs": [], "chosen_prob": [], "chosen_rank": []}
    block = head_rows(loaded.predictor, LENS_BYTES_PER_LOGIT, LENS_ROWS)
    with torch.inference_mode():
        for start in range(0, flat.shape[0], block):
            if start and step is not None:
                step()
            h = flat[start : start + block]
            logits = head_logits(loaded.predictor, h if norm is None else norm(h))  # (n, vocab)
            top = logits.topk(min(k, logits.shape[-1]), dim=-1)
            lse = logsumexp64(logits, top.values[:, :1])  # (n,) float64
            parts["ids"].append(top.indices.cpu())
            parts["probs"].append((top.values.double() - lse[:, None]).exp().float().cpu())
            if chosen is not None:
                mine = logits[:, chosen : chosen + 1]
                parts["chosen_prob"].append((mine[:, 0].double() - lse).exp().float().cpu())
                above = (logits > mine).sum(dim=-1, dtype=torch.int32)
                parts["chosen_rank"].append((above + 1).long().cpu())
    found = {
        name: torch.cat(values).reshape(*shape, *values[0].shape[1:]) if values else None
        for name, values in parts.items()
    }
    return LensGrid(**found)
