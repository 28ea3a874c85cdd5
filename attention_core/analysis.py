"""Numbers that describe a softmax: how peaked it is and how much gradient it lets through.

All functions reduce over the last dim (keys) of weights shaped (..., k_len).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


def entropy(weights: Tensor) -> Tensor:
    """Shannon entropy in nats, with 0·log 0 = 0. (..., k_len) -> (...)."""
    logs = torch.where(
        weights > 0, weights.log(), torch.zeros((), dtype=weights.dtype, device=weights.device)
    )
    return -(weights * logs).sum(dim=-1)


def max_weight(weights: Tensor) -> Tensor:
    """Largest weight of each row. (..., k_len) -> (...)."""
    return weights.amax(dim=-1)


def effective_tokens(weights: Tensor) -> Tensor:
    """exp(entropy): 1 for a one-hot row, k_len for a uniform row. (..., k_len) -> (...)."""
    return entropy(weights).exp()


def softmax_jacobian(weights: Tensor) -> Tensor:
    """d softmax / d logits = diag(p) - p p^T. (..., k_len) -> (..., k_len, k_len)."""
    return torch.diag_embed(weights) - weights.unsqueeze(-1) * weights.unsqueeze(-2)


def jacobian_frobenius_norm(weights: Tensor) -> Tensor:
    """||diag(p) - p p^T||_F without building the matrix. (..., k_len) -> (...).

    The entries are p_i (1 - p_i) on the diagonal and -p_i p_j off it, so
        ||J||^2 = sum_i p_i^2 (1 - p_i)^2 + sum_{i != j} p_i^2 p_j^2.
    Near a one-hot row the norm tends to 0 (the softmax saturates and gradients vanish);
    uniform rows over n keys give sqrt(n-1)/n. Written as sums of positive terms, with
    1 - p_max taken as the sum of the other weights, it keeps its relative accuracy when the
    row saturates (the expanded form sum p^2 - 2 sum p^3 + (sum p^2)^2 cancels to 0 there).
    The squares are summed in float64, where they do not underflow before the root is taken;
    the result has the input's dtype.
    """
    dtype = weights.dtype
    weights = weights.to(torch.float64)
    top = weights.argmax(dim=-1, keepdim=True)  # (..., 1)
    is_top = torch.zeros_like(weights, dtype=torch.bool).scatter(-1, top, True)
    others = torch.where(is_top, weights.new_zeros(()), weights)  # (..., k_len)
    p_top = weights.gather(-1, top)  # (..., 1)
    rest = others.sum(dim=-1, keepdim=True)  # 1 - p_top, without cancellation
    # Only the largest weight can exceed 1/2, so 1 - p_i is accurate for every other key.
    one_minus = torch.where(is_top, rest, 1 - weights)  # (..., k_len)
    diagonal = (weights * one_minus).square().sum(dim=-1)
    s2 = others.square().sum(dim=-1)  # sum of p_j^2 over the other keys
    s4 = others.square().square().sum(dim=-1)
    pairs_with_top = 2 * p_top.squeeze(-1).square() * s2
    pairs_among_others = (s2.square() - s4).clamp_min(0)
    return (diagonal + pairs_with_top + pairs_among_others).sqrt().to(dtype)


@dataclass(frozen=True)
class SoftmaxStats:
    """Summary of softmax rows; each field has the logits' leading shape (...)."""

    weights: Tensor  # (..., k_len)
    entropy: Tensor
    max_weight: Tensor
    effective_tokens: Tensor
    jacobian_norm: Tensor


def softmax_stats(logits: Tensor) -> SoftmaxStats:
    """Softmax of logits (..., k_len) and its summary numbers."""
    weights = torch.softmax(logits, dim=-1)
    return SoftmaxStats(
        weights=weights,
        entropy=entropy(weights),
        max_weight=max_weight(weights),
        effective_tokens=effective_tokens(weights),
        jacobian_norm=jacobian_frobenius_norm(weights),
    )


@dataclass(frozen=True)
class ScoreVariance:
    """Empirical variance of q·k for random q, k with unit-variance components."""

    d_k: list[int]
    unscaled: list[float]  # var(q·k): theory says d_k
    scaled: list[float]  # var(q·k / sqrt(d_k)): theory says 1


def score_variance(d_k_values: list[int], *, n_samples: int = 4096, seed: int = 0) -> ScoreVariance:
    """Measure var(q·k) scaled and unscaled for each d_k, from n_samples seeded pairs."""
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2; got {n_samples}")
    g = torch.Generator().manual_seed(seed)
    unscaled, scaled = [], []
    for d_k in d_k_values:
        if d_k < 1:
            raise ValueError(f"d_k must be >= 1; got {d_k}")
        q = torch.randn(n_samples, d_k, generator=g, dtype=torch.float64)
        k = torch.randn(n_samples, d_k, generator=g, dtype=torch.float64)
        dots = (q * k).sum(dim=-1)  # (n_samples,)
        unscaled.append(float(dots.var()))
        scaled.append(float((dots / math.sqrt(d_k)).var()))
    return ScoreVariance(d_k=list(d_k_values), unscaled=unscaled, scaled=scaled)


def total_variation(p: Tensor, q: Tensor) -> Tensor:
    """Half the L1 distance between attention rows: 0 for the same row, 1 for disjoint ones.
    p, q: (..., k_len) -> (...)."""
    return 0.5 * (p - q).abs().sum(dim=-1)


def value_weighted_norms(weights: Tensor, v: Tensor) -> Tensor:
    """‖α_ij v_j‖ = α_ij ‖v_j‖: how much of key j's value vector query i really mixes in
    (the norm-based view of Kobayashi et al., 2020, here without the output projection).

    weights (..., q_len, k_len), v (..., k_len, d_v) -> (..., q_len, k_len). A key can take
    most of the attention and still add almost nothing when its value vector is short: the
    weights alone overstate [CLS], [SEP] and punctuation in BERT-style models."""
    return weights * torch.linalg.vector_norm(v, dim=-1).unsqueeze(-2)
