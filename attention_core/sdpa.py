"""Scaled dot-product attention that returns every intermediate stage."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from attention_core.validation import check_mask, check_qkv

Scale = bool | float | int | None
"""True or None: 1/sqrt(d_k) (the default). False: 1 (unscaled). A number: that number."""


@dataclass(frozen=True)
class AttentionTrace:
    """Every stage of one attention call. Patterns are (batch, heads, q_len, k_len)."""

    scores: Tensor  # q @ k^T, before any scaling
    scaled_scores: Tensor  # scores * scale / temperature: the logits softmax sees
    masked_scores: Tensor  # scaled_scores with -inf where the mask forbids attention
    weights: Tensor  # softmax over keys; masked cells exactly 0, fully masked rows all 0
    output: Tensor  # weights @ v, (batch, heads, q_len, d_v)
    scale: float
    temperature: float


def resolve_scale(scale: Scale, d_k: int) -> float:
    """Turn the user-facing `scale` option into the number that multiplies q @ k^T."""
    if scale is None or scale is True:
        return 1.0 / math.sqrt(d_k)
    if scale is False:
        return 1.0
    value = float(scale)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"scale must be a positive finite number, True or False; got {scale!r}")
    return value


def masked_softmax(logits: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last dim where forbidden cells get exactly 0.

    logits: (..., q_len, k_len); mask: bool, broadcastable, True = may attend.
    A row with no allowed cell returns all zeros instead of NaN.
    """
    if mask is None:
        return torch.softmax(logits, dim=-1)
    masked = logits.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    any_allowed = mask.any(dim=-1, keepdim=True)
    return torch.where(any_allowed, weights, torch.zeros((), dtype=weights.dtype))


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    scale: Scale = True,
    temperature: float = 1.0,
) -> AttentionTrace:
    """softmax(q k^T * scale / temperature, masked) @ v, with every stage kept.

    q: (..., q_len, d_k), k: (..., k_len, d_k), v: (..., k_len, d_v);
    mask: bool broadcastable to (..., q_len, k_len), True = may attend.
    Returns an AttentionTrace; its output is (..., q_len, d_v).
    """
    check_qkv(q, k, v)
    if mask is not None:
        check_mask(mask, q.shape[:-2], q.shape[-2], k.shape[-2])
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number; got {temperature!r}")
    scale_value = resolve_scale(scale, q.shape[-1])

    scores = q @ k.transpose(-2, -1)  # (..., q_len, k_len)
    scaled = scores * (scale_value / temperature)
    masked = scaled if mask is None else scaled.masked_fill(~mask, float("-inf"))
    weights = masked_softmax(scaled, mask)
    output = weights @ v  # (..., q_len, d_v)
    return AttentionTrace(
        scores=scores,
        scaled_scores=scaled,
        masked_scores=masked,
        weights=weights,
        output=output,
        scale=scale_value,
        temperature=float(temperature),
    )
