"""How heads compose, from their weights alone: Q-, K- and V-composition scores.

Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits". A head reads the
residual stream x (a column vector of width d) and writes W_OV x, W_OV = W_O W_V (d × d); its
score from a query position reading x_q to a key reading x_k is x_q^T W_QK x_k, W_QK = W_Q^T W_K
(d × d). With W_Q, W_K, W_V (hd × d) and W_O (d × hd), an earlier head A's write reaches a later
head B's
  key:   x_k ∋ W_OV^A y, so B's score holds x_q^T (W_QK^B W_OV^A) y,
  query: x_q ∋ W_OV^A y, so it holds y^T (W_OV^A^T W_QK^B) x_k, the transpose of W_QK^B^T W_OV^A,
  value: B's write holds W_OV^B W_OV^A y,
and each score is the Frobenius norm of that product over the product of the two norms:
  Q-comp = ‖W_QK^B^T W_OV^A‖ / (‖W_QK^B‖ ‖W_OV^A‖),
  K-comp = ‖W_QK^B W_OV^A‖ / (‖W_QK^B‖ ‖W_OV^A‖),
  V-comp = ‖W_OV^B W_OV^A‖ / (‖W_OV^B‖ ‖W_OV^A‖).
For all pairs at once the squared numerators are inner products of d × d Gram matrices, each
made once per head: ‖X^T Y‖² = <X X^T, Y Y^T> gives
  Q: ‖W_QK^B^T W_OV^A‖² = <W_Q^T S_K W_Q, N_A>,  K: <W_K^T S_Q W_K, N_A>,
  V: <W_V^T (W_O^T W_O) W_V, N_A>,  with N_A = W_O^A S_V^A W_O^A^T and S_X = W_X W_X^T (hd × hd),
and the norms ‖W_QK‖² = <S_Q, S_K>, ‖W_OV‖² = <W_O^T W_O, S_V> are hd × hd. A pair then costs
d(d + 1)/2 multiply-adds (the Grams are symmetric: their upper triangles, off-diagonal entries
counted twice), where the product of low-rank factors ‖(R_K W_Q)(W_O R_V^T)‖ would cost hd² · d,
14 times more for SmolLM2 (d = 576, hd = 64), whose 9 heads a layer fill the whole width.
A score read through its square carries the square's rounding: in float32 about 1e-6 of a
score near the baseline (SmolLM2: at most 8.4e-7), while a score of exactly 0 reads as the
square root of the rounding (3e-5 for a test's d = 16 in float32, 2e-9 in float64).

Shapes: L layers, H heads a layer, d the stream's width, hd a head's width (W_V's rows may be
a different width, hdv, from W_Q's and W_K's). Every array of scores is (L, H, L, H), indexed
[earlier layer a, earlier head, later layer b, later head]: NaN unless a < b.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

KINDS = ("q", "k", "v")


@dataclass(frozen=True)
class Composition:
    """Each kind's scores (L, H, L, H) float32, [a, i, b, j] for head (a, i) into (b, j), NaN
    unless a < b; `norms_qk` and `norms_ov` (L, H) float64: ‖W_QK‖ and ‖W_OV‖ of each head."""

    scores: dict[str, Tensor]
    norms_qk: Tensor
    norms_ov: Tensor


def _inner(x: Tensor, y: Tensor) -> Tensor:
    """<x, y> over the last two dimensions: (..., m, n) twice -> (...)."""
    return (x * y).sum((-1, -2))


def _grams(w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor):
    """(s_q, s_k, s_v, s_o): W_Q W_Q^T, W_K W_K^T, W_V W_V^T and W_O^T W_O, (..., H, r, r) in
    float64, the key/value heads' repeated for each query head of their group."""
    w_q, w_k, w_v, w_o = (w.double() for w in (w_q, w_k, w_v, w_o))
    kv = torch.arange(w_q.shape[-3], device=w_q.device) // (
        w_q.shape[-3] // w_k.shape[-3]
    )  # query -> kv head
    s_k, s_v = (w @ w.transpose(-1, -2) for w in (w_k, w_v))
    return w_q @ w_q.transpose(-1, -2), s_k[..., kv, :, :], s_v[..., kv, :, :], w_o.mT @ w_o


def _packed(grams: Tensor, upper: tuple[Tensor, Tensor]) -> Tensor:
    """Symmetric (..., d, d) -> (..., d(d + 1)/2): the upper triangle, off-diagonal entries
    doubled, so that <a, b> of two symmetric matrices is packed(a) · (upper triangle of b)."""
    flat = grams[..., upper[0], upper[1]]
    return flat * torch.where(upper[0] == upper[1], 1.0, 2.0).to(flat.dtype)


def composition_scores(
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor,
    *,
    dtype: torch.dtype = torch.float32,
    progress: Callable[[float], None] | None = None,
) -> Composition:
    """Every pair's Q-, K- and V-composition scores (see the module docstring).

    w_q: (L, H, hd, d); w_k: (L, KV, hd, d); w_v: (L, KV, hdv, d); w_o: (L, H, d, hdv). KV
    divides H: under GQA query head h reads key/value head h // (H / KV) (KV = H without it).
    The hd × hd Grams and the norms are taken in float64; the d × d Grams and their inner
    products in `dtype`. `progress(fraction)` is called as each later layer is scored (its
    cost grows with the earlier heads it reads, so the fraction counts pairs scored)."""
    layers, heads, hd, d = w_q.shape
    kv_heads = w_k.shape[1]
    if (
        w_k.shape != (layers, kv_heads, hd, d)
        or w_v.shape[:2] != (layers, kv_heads)
        or w_v.shape[-1] != d
        or heads % kv_heads
    ):
        raise ValueError(
            f"w_q must be (L, H, hd, d), w_k (L, KV, hd, d) and w_v (L, KV, hdv, d) with KV "
            f"dividing H: got {tuple(w_q.shape)}, {tuple(w_k.shape)} and {tuple(w_v.shape)}"
        )  # fmt: skip
    hdv = w_v.shape[2]
    if w_o.shape != (layers, heads, d, hdv):
        raise ValueError(f"w_o must be (L, H, d, hdv) = {(layers, heads, d, hdv)}: got "
                         f"{tuple(w_o.shape)}")  # fmt: skip
    s_q, s_k, s_v, s_o = _grams(w_q, w_k, w_v, w_o)  # (L, H, r, r)
    norms_qk = _inner(s_q, s_k).clamp_min(0).sqrt()  # ‖W_Q^T W_K‖, (L, H)
    norms_ov = _inner(s_o, s_v).clamp_min(0).sqrt()  # ‖W_O W_V‖
    kv = torch.arange(heads, device=w_q.device) // (heads // kv_heads)
    upper = torch.triu_indices(d, d)
    w_q, w_o = w_q.to(dtype), w_o.to(dtype)
    w_k, w_v = w_k.to(dtype)[:, kv], w_v.to(dtype)[:, kv]  # (L, H, hd or hdv, d)
    # N_A = W_O S_V W_O^T of every earlier head, packed: (L · H, d(d + 1)/2)
    earlier = torch.cat([_packed(w_o[a] @ s_v[a].to(dtype) @ w_o[a].mT, upper)
                         for a in range(layers - 1)])  # fmt: skip
    scores = {
        k: torch.full((layers, heads, layers, heads), math.nan, device="cpu") for k in KINDS
    }  # fmt: skip  (the answer is read on the host)
    for b in range(1, layers):
        later = {  # each later head's Gram for the kind, (H, d, d)
            "q": w_q[b].mT @ s_k[b].to(dtype) @ w_q[b],
            "k": w_k[b].mT @ s_q[b].to(dtype) @ w_k[b],
            "v": w_v[b].mT @ s_o[b].to(dtype) @ w_v[b],
        }
        for kind, grams in later.items():
            rows = grams[..., upper[0], upper[1]]  # (H, d(d + 1)/2)
            squares = earlier[: b * heads] @ rows.T  # (b · H, H)
            numerator = squares.double().clamp_min(0).sqrt().reshape(b, heads, heads)
            later_norms = (norms_ov if kind == "v" else norms_qk)[b]
            denominator = norms_ov[:b, :, None] * later_norms[None, None, :]
            scores[kind][:b, :, b] = (numerator / denominator.clamp_min(1e-300)).float()
        if progress is not None:
            progress(b * (b + 1) / (layers * (layers - 1)))  # earlier layers read so far, summed
    return Composition(scores=scores, norms_qk=norms_qk, norms_ov=norms_ov)


def direct_scores(
    w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, earlier: tuple, later: tuple
) -> dict[str, float]:
    """The three scores of one pair from the d × d matrices themselves (the definition, for
    tests and for reading): the weights as composition_scores', the heads (layer, head)."""
    group = w_q.shape[1] // w_k.shape[1]
    (a, i), (b, j) = earlier, later
    qk = w_q[b, j].double().T @ w_k[b, j // group].double()  # (d, d)
    ov_a = w_o[a, i].double() @ w_v[a, i // group].double()
    ov_b = w_o[b, j].double() @ w_v[b, j // group].double()
    norm = torch.linalg.matrix_norm
    return {
        "q": float(norm(qk.T @ ov_a) / (norm(qk) * norm(ov_a))),
        "k": float(norm(qk @ ov_a) / (norm(qk) * norm(ov_a))),
        "v": float(norm(ov_b @ ov_a) / (norm(ov_b) * norm(ov_a))),
    }


BASELINE_SAMPLES = 32
BASELINE_SEED = 0


@lru_cache(maxsize=16)
def random_baseline(d: int, hd: int, hdv: int | None = None) -> dict[str, float]:
    """Each kind's mean score between two heads of Gaussian random weights of these shapes
    (W_Q, W_K: hd × d, W_V: hdv × d, W_O: d × hdv, every entry N(0, 1)), over BASELINE_SAMPLES
    pairs drawn with the fixed seed BASELINE_SEED: what the score is for heads unrelated by
    construction. Computed once per shape: about 1/√d (0.0416 for d = 576, hd = 64)."""
    hdv = hd if hdv is None else hdv
    generator = torch.Generator().manual_seed(BASELINE_SEED)

    def draw(*shape: int) -> Tensor:  # (samples, 2 heads: earlier, later, *shape)
        return torch.randn(
            BASELINE_SAMPLES, 2, *shape, generator=generator, dtype=torch.float64, device="cpu"
        )  # the seeded generator's device: the same baseline wherever the model runs

    w_q, w_k, w_v, w_o = draw(hd, d), draw(hd, d), draw(hdv, d), draw(d, hdv)
    s_q, s_k, s_v, s_o = _grams(w_q, w_k, w_v, w_o)  # (samples, 2, r, r)
    norms_qk, norms_ov = _inner(s_q, s_k).sqrt(), _inner(s_o, s_v).sqrt()  # (samples, 2)
    totals = dict.fromkeys(KINDS, 0.0)
    for n in range(BASELINE_SAMPLES):  # one pair at a time: a few d × d matrices held
        n_a = w_o[n, 0] @ s_v[n, 0] @ w_o[n, 0].T  # (d, d)
        later = {
            "q": w_q[n, 1].T @ s_k[n, 1] @ w_q[n, 1],
            "k": w_k[n, 1].T @ s_q[n, 1] @ w_k[n, 1],
            "v": w_v[n, 1].T @ s_o[n, 1] @ w_v[n, 1],
        }
        for kind, grams in later.items():
            norms = (norms_ov if kind == "v" else norms_qk)[n, 1] * norms_ov[n, 0]
            totals[kind] += float(_inner(grams, n_a).sqrt() / norms)
    return {kind: total / BASELINE_SAMPLES for kind, total in totals.items()}
