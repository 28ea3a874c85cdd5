"""HeadVis's numbers for a head over a corpus (Luger, Kamath et al., 2026; the data tree that
Neuronpedia publishes): per-sequence sums that pool into its six metrics, each sequence's
max_activation and sparse top-k map, and the aggregates of a head file. Definitions follow the
format's specification (§7 and §8 of ../shared/HEADVIS-FORMAT.md in the development tree,
summarised in docs/corpus.md), which differ from Atlas's own statistics
(attention_core.head_stats) on purpose: every row of the run weighs the same, entropy is in
nats, induction matches one token and ignores weights under a threshold.

Maps are (batch, heads, q, k) with rows of padded sequences: `lengths` (batch,) says how many
positions of each are real; nothing past them counts. `heads` may be every head of every layer
flattened (layers · heads), since no number here mixes heads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

METRICS = (
    # The order of HeadVis's scatter columns, and of SUMS' first six columns.
    "self_attention_score",
    "prev_token_score",
    "pattern_entropy",
    "qk_distance",
    "qk_distance_variance",
    "induction_score",
)
LABELS = {
    # How a page names each (HeadVis's names, so a reader finds them in HeadVis too).
    "self_attention_score": "HeadVis self-attention",
    "prev_token_score": "HeadVis previous-token",
    "pattern_entropy": "HeadVis entropy (nats)",
    "qk_distance": "HeadVis q–k distance",
    "qk_distance_variance": "HeadVis q–k distance variance",
    "induction_score": "HeadVis induction",
}
DESCRIPTIONS = {
    # HeadVis's own tooltips (config.json metric_descriptions), word for word.
    "self_attention_score": "Mean attention from each query position to itself (the diagonal). "
    "Heads near 1 dump nearly all attention onto the current token.",
    "prev_token_score": "Mean attention to the immediately preceding token (first "
    "subdiagonal). High values mark previous-token / shift heads.",
    "pattern_entropy": "Mean Shannon entropy of each row of the attention matrix. High = "
    "dispersed attention; low = highly peaked.",
    "qk_distance": "Mean |q - k| weighted by attention mass. Captures how far back a head looks "
    "on average.",
    "qk_distance_variance": "Variance of |q - k| weighted by attention mass.",
    "induction_score": "Average attention from a query token to the position after a prior "
    "occurrence of the same token. High = induction head.",
}
SUMS = (
    "self",
    "previous",
    "entropy",
    "distance",
    "distance_squared",
    "induction",
    "max_activation",
)
"""Columns of sequence_sums: five sums over rows, the thresholded induction sum, and the
sequence's max_activation (a maximum, not a sum)."""

DISTANCE_EDGES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
ACTIVATION_BINS = 50
INDUCTION_THRESHOLD = 0.01


def _valid(lengths: Tensor, size: int) -> Tensor:
    """(batch, size) bool: the real positions of each sequence."""
    return torch.arange(size, device=lengths.device)[None, :] < lengths[:, None]


def induction_pairs(ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """HeadVis's induction pairs: (q, p + 1) for every earlier copy p < q of query q's token id.

    ids (batch, T) int64, lengths (batch,) -> (pairs (batch, T, T) bool at [q, k], counted
    (batch,) int64: real queries with at least one earlier copy). A pair's key can be the query
    itself (a token repeated at once); nothing checks the tokens before the copies."""
    size = ids.shape[1]
    valid = _valid(lengths, size)
    same = (ids[:, :, None] == ids[:, None, :]) & valid[:, :, None] & valid[:, None, :]
    earlier = torch.ones(size, size, dtype=torch.bool, device=ids.device).tril(-1)  # p < q
    copies = same & earlier  # (batch, q, p)
    pairs = torch.zeros_like(copies)
    pairs[:, :, 1:] = copies[:, :, :-1]  # key p + 1 for each copy p
    return pairs, copies.any(dim=2).sum(dim=1)


def sequence_sums(
    maps: Tensor, ids: Tensor, lengths: Tensor, threshold: float = INDUCTION_THRESHOLD
) -> tuple[Tensor, Tensor]:
    """What each sequence adds to HeadVis's pooled metrics, and its max_activation.

    maps (batch, heads, T, T) float, ids (batch, T), lengths (batch,) ->
    (sums (batch, heads, len(SUMS)) float32, induction_rows (batch,) int64). A metric of the run
    is the sum of its column over sequences over the run's row count (pooled_metrics). Rows are
    the real query rows; row 0 counts (it adds 1 to self in a causal map, 0 to entropy)."""
    batch, heads, size, _ = maps.shape
    weights = maps.float()
    valid = _valid(lengths, size).to(weights.dtype)  # (batch, T)
    cells = valid[:, None, :, None] * valid[:, None, None, :]  # (batch, 1, T, T)
    weights = weights * cells  # padded rows and keys add nothing
    index = torch.arange(size, device=maps.device, dtype=weights.dtype)
    gap = (index[:, None] - index[None, :]).abs()  # (T, T) |q - k|
    tiny = torch.finfo(torch.float32).tiny
    out = torch.empty(batch, heads, len(SUMS), dtype=torch.float32, device=maps.device)
    out[..., 0] = weights.diagonal(dim1=-2, dim2=-1).sum(-1)
    out[..., 1] = weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1)
    out[..., 2] = -(weights * weights.clamp_min(tiny).log()).sum((-2, -1))
    out[..., 3] = torch.einsum("bhqk,qk->bh", weights, gap)
    out[..., 4] = torch.einsum("bhqk,qk->bh", weights, gap * gap)
    pairs, counted = induction_pairs(ids, lengths)
    kept = weights * (weights >= threshold) * pairs[:, None].to(weights.dtype)
    out[..., 5] = kept.sum((-2, -1))
    inner = weights[:, :, 1:, 1:]  # rows and keys from 1: position 0 left out
    out[..., 6] = inner.amax(dim=(-2, -1)) if size > 1 else 0.0
    return out, counted


def pooled_metrics(sums: np.ndarray, lengths: np.ndarray, induction_rows: np.ndarray) -> dict:
    """HeadVis's six metrics from per-sequence sums: every row of the run weighs the same.

    sums (sequences, heads, len(SUMS)), lengths (sequences,), induction_rows (sequences,) ->
    {metric: (heads,) float64 with NaN where the denominator is 0}, unrounded."""
    total = sums.astype(np.float64).sum(axis=0)  # (heads, SUMS)
    rows = float(lengths.sum())
    previous_rows = float((lengths - 1).sum())
    counted = float(induction_rows.sum())

    def over(values: np.ndarray, n: float) -> np.ndarray:
        return values / n if n > 0 else np.full_like(values, np.nan)

    mean = over(total[:, 3], rows)
    return {
        "self_attention_score": over(total[:, 0], rows),
        "prev_token_score": over(total[:, 1], previous_rows),
        "pattern_entropy": over(total[:, 2], rows),
        "qk_distance": mean,
        "qk_distance_variance": over(total[:, 4], rows) - mean * mean,
        "induction_score": over(total[:, 5], counted),
    }


def sparse_rows(maps: Tensor, lengths: Tensor, top: int, threshold: float) -> tuple[Tensor, Tensor]:
    """HeadVis's sparse map of each sequence: per query row the `top` largest weights that
    reach `threshold` (> 0), rounded to 4 decimals.

    maps (batch, heads, T, T) -> (keys (batch, heads, T, k) int64, values (batch, heads, T, k)
    float32 with 0 where nothing is kept), k = min(top, T). Padded rows and keys keep nothing."""
    if not 0 < threshold < 1:
        raise ValueError(f"the sparse threshold must be in (0, 1); got {threshold}")
    size = maps.shape[-1]
    valid = _valid(lengths, size)
    weights = maps.float() * (valid[:, None, :, None] & valid[:, None, None, :])
    found = weights.topk(min(top, size), dim=-1)
    values = torch.round(found.values.double() * 1e4) / 1e4
    values = torch.where(found.values >= threshold, values, 0.0).float()
    return found.indices, values


def coo(keys: np.ndarray, values: np.ndarray) -> tuple[list[int], list[float]]:
    """One head's sparse map of one sequence as HeadVis's flat COO: keys, values (L, k) ->
    (indices q · L + k strictly increasing, values as float32 doubles)."""
    length = keys.shape[0]
    rows, slots = np.nonzero(values > 0)
    flat = rows * length + keys[rows, slots]
    order = np.argsort(flat, kind="stable")
    kept = values[rows, slots][order].astype(np.float32)
    return flat[order].astype(np.int64).tolist(), [float(v) for v in kept]


def warmup_size(sequences: int) -> int:
    """The sequences whose max_activation sets the interval boundaries: HeadVis's rule,
    max(1, min(2000, max(50, ⌊n / 10⌋))), here at most a quarter of a short run so that a run
    of a few hundred texts still samples most of them."""
    rule = max(1, min(2000, max(50, sequences // 10)))
    return max(1, min(rule, sequences // 4))


def boundaries(warm: np.ndarray, intervals: int) -> np.ndarray:
    """Equal-frequency boundaries between intervals from the warm-up's max_activations.

    warm (W, heads) -> (heads, intervals - 1): boundary i is v[min(round(i · W / n), W - 1)] of
    each head's sorted values (round halves to even, as Python's)."""
    count = warm.shape[0]
    ordered = np.sort(warm, axis=0)
    at = [min(round(i * count / intervals), count - 1) for i in range(1, intervals)]
    return ordered[at].T if at else np.zeros((warm.shape[1], 0), warm.dtype)


def route(activation: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each sequence's interval per head, 1 (lowest) .. intervals: 1 + boundaries ≤ it.

    activation (sequences, heads), edges (heads, intervals - 1) -> (sequences, heads) int."""
    return 1 + (edges[None, :, :] <= activation[:, :, None]).sum(-1)


def priorities(seed: int, head_ids: np.ndarray, sequence: int) -> np.ndarray:
    """A uniform draw in [0, 1) per head for one sequence, fixed by (seed, head, sequence)
    alone: a lower interval keeps the sequences of smallest draw, a uniform sample that does
    not depend on the order in which sequences are finished (splitmix64 of the three)."""
    mask = np.uint64(0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        x = (
            np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
            + head_ids.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
            + np.uint64(sequence) * np.uint64(0x94D049BB133111EB)
        ) & mask
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def distance_histogram(samples: Sequence[tuple[list[int], list[float], int]]) -> list[float]:
    """Kept attention mass per distance bin over sampled sequences: [(indices, values, L)] ->
    13 sums (bins [0, 1), [1, 2), [2, 4) ... [2048, 4096)), unrounded."""
    out = np.zeros(len(DISTANCE_EDGES) - 1)
    for indices, values, length in samples:
        flat = np.asarray(indices, dtype=np.int64)
        gap = np.abs(flat // length - flat % length)
        bins = np.searchsorted(DISTANCE_EDGES, gap, side="right") - 1
        inside = gap < DISTANCE_EDGES[-1]
        np.add.at(out, bins[inside], np.asarray(values, dtype=np.float64)[inside])
    return out.tolist()


def token_tables(
    samples: Sequence[tuple[list[int], list[float], list[str]]], count: int = 50
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """HeadVis's top query and key tokens: kept weights summed per decoded token string over
    sampled sequences [(indices, values, tokens)] -> (queries, keys), each the `count` largest,
    highest first, ties in the order first met."""
    queries: dict[str, float] = {}
    keys: dict[str, float] = {}
    for indices, values, tokens in samples:
        length = len(tokens)
        for index, value in zip(indices, values, strict=True):
            q, k = divmod(index, length)
            queries[tokens[q]] = queries.get(tokens[q], 0.0) + value
            keys[tokens[k]] = keys.get(tokens[k], 0.0) + value

    def top(table: dict[str, float]) -> list[tuple[str, float]]:
        return sorted(table.items(), key=lambda item: -item[1])[:count]

    return top(queries), top(keys)


def activation_histogram(activation: np.ndarray) -> list[int]:
    """Sequences per bin of max_activation: (sequences,) -> ACTIVATION_BINS counts of
    [i / 50, (i + 1) / 50), 1.0 in the last."""
    bins = np.minimum(ACTIVATION_BINS - 1, np.floor(activation * ACTIVATION_BINS)).astype(int)
    return np.bincount(bins, minlength=ACTIVATION_BINS).tolist()


def round4(value: float | None) -> float | None:
    """HeadVis's rounding of a written scalar: 4 decimals; None for a non-finite value."""
    return None if value is None or not math.isfinite(value) else round(float(value), 4)
