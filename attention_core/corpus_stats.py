"""What a head does across many texts, one text at a time: the per-text pieces a corpus job
keeps besides the head statistics (attention_core.head_stats), each small enough to store for
every text and every head, and summed or ranked across texts later.

Shapes: weights (heads, seq, seq), rows summing to at most 1 over the keys each query sees.
"""

from __future__ import annotations

import torch
from torch import Tensor

DISTANCE_EDGES = (0, 1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513)
"""Bins of |query - key| in tokens: [0, 1), [1, 2), [2, 3), [3, 5), [5, 9) ... [513, ∞)."""


def distance_histogram(weights: Tensor) -> Tensor:
    """How much attention goes each distance back (or forward), summed over query rows:
    (..., seq, seq) -> (..., len(DISTANCE_EDGES)), e.g. (heads, seq, seq) or a padded batch
    (batch, heads, seq, seq) whose padded rows and keys hold 0; row i's weight on key j falls in
    the bin of |i - j|, so a head's histogram sums to its rows' total weight (the number of
    rows where every row sums to 1)."""
    seq = weights.shape[-1]
    index = torch.arange(seq, device=weights.device)
    distance = (index[:, None] - index[None, :]).abs()  # (seq, seq)
    edges = torch.tensor(DISTANCE_EDGES, device=weights.device)
    bins = torch.bucketize(distance, edges, right=True) - 1  # (seq, seq) in 0 .. len - 1
    lead = weights.shape[:-2]
    flat = weights.reshape(-1, seq * seq)  # (..., seq · seq): a view where weights is contiguous
    out = torch.zeros(
        flat.shape[0], len(DISTANCE_EDGES), dtype=weights.dtype, device=weights.device
    )
    out.scatter_add_(1, bins.flatten().expand(flat.shape[0], -1), flat)
    return out.view(*lead, len(DISTANCE_EDGES))


def token_weights(weights: Tensor, ignore: Tensor) -> tuple[Tensor, Tensor]:
    """What strongest_tokens ranks, for a padded batch at once: weights (batch, heads, seq, seq)
    with padded rows and keys 0, ignore (batch, seq) bool keys left out -> (received, sharpest),
    each (batch, heads, seq): the attention each key position receives (summed over rows) and
    each query's largest weight on a key not ignored, both 0 where ignored or padded."""
    received = weights.sum(dim=-2).masked_fill(ignore[:, None, :], 0.0)
    sharpest = weights.masked_fill(ignore[:, None, None, :], 0.0).amax(dim=-1)
    return received, sharpest


def strongest_of(
    received: Tensor, sharpest: Tensor, ids: Tensor, count: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """strongest_tokens from one text's token_weights: received, sharpest (heads, seq), ids
    (seq,) -> (to_ids, to_weight, from_ids, from_weight), each (heads, count)."""
    heads = received.shape[0]
    unique, where = torch.unique(ids, return_inverse=True)  # (u,), (seq,)
    totals = torch.zeros(heads, unique.shape[0], dtype=received.dtype, device=received.device)
    totals.index_add_(1, where, received)  # (heads, u): every copy of a token summed
    best = torch.zeros(heads, unique.shape[0], dtype=received.dtype, device=received.device)
    best.scatter_reduce_(1, where.expand(heads, -1), sharpest, reduce="amax")
    k = min(count, unique.shape[0])

    def top(values: Tensor) -> tuple[Tensor, Tensor]:
        found = values.topk(k, dim=1)
        found_ids = torch.full((heads, count), -1, dtype=torch.int64, device=received.device)
        found_values = torch.zeros(heads, count, dtype=received.dtype, device=received.device)
        found_ids[:, :k] = unique[found.indices]
        found_values[:, :k] = found.values
        return found_ids, found_values

    return (*top(totals), *top(best))


def strongest_tokens(
    weights: Tensor, ids: Tensor, ignore: Tensor, count: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The tokens a head reads most and those that read most sharply, in one text.

    weights (heads, seq, seq); ids (seq,) int64 vocabulary ids; ignore (seq,) bool: keys left
    out (the first token, where most heads park attention they do not use, and specials).
    Returns (to_ids, to_weight, from_ids, from_weight), each (heads, count): the vocabulary ids
    with the most attention received (summed over rows and over the text's copies of the token)
    and the query tokens with the largest single weight on a key not ignored (their best
    weight). Fewer distinct tokens than count leave the rest -1 and 0."""
    received, sharpest = token_weights(weights[None], ignore[None])
    return strongest_of(received[0], sharpest[0], ids, count)
