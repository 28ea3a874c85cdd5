"""Scaled dot-product attention that returns every intermediate stage."""

from __future__ import annotations

import torch
from torch import Tensor

from attention_core.trace import (
    Cost,
    Scale,
    Trace,
    check_temperature,
    combined_mask,
    resolve_scale,
)
from attention_core.validation import check_mask, check_qkv

AttentionTrace = Trace  # the name callers of scaled_dot_product_attention know

__all__ = [
    "AttentionTrace",
    "Scale",
    "masked_softmax",
    "resolve_scale",
    "scaled_dot_product_attention",
]


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
    return torch.where(
        any_allowed, weights, torch.zeros((), dtype=weights.dtype, device=weights.device)
    )


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: Scale = True,
    temperature: float = 1.0,
    default_scale: float | None = None,
) -> Trace:
    """softmax(q k^T * scale / temperature, masked) @ v, with every stage kept.

    q: (..., q_len, d_k), k: (..., k_len, d_k), v: (..., k_len, d_v);
    mask: bool broadcastable to (..., q_len, k_len), True = may attend; causal adds key j <= i.
    default_scale: what scale=True means (a model's own scale; 1/sqrt(d_k) if None).
    Returns a Trace; its output is (..., q_len, d_v).
    """
    check_qkv(q, k, v)
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask is not None:
        check_mask(mask, q.shape[:-2], q_len, k_len)
    temperature = check_temperature(temperature)
    scale_value = resolve_scale(scale, q.shape[-1], default_scale)
    mask = combined_mask(mask, causal, q_len, k_len, q.device)

    scores = q @ k.transpose(-2, -1)  # (..., q_len, k_len)
    return softmax_trace("dot", scores, v, mask, scale_value, temperature)


def softmax_trace(
    variant: str,
    scores: Tensor,
    v: Tensor,
    mask: Tensor | None,
    scale: float,
    temperature: float,
    stages: dict[str, Tensor] | None = None,
) -> Trace:
    """The stages every dense softmax variant shares, from its raw scores (..., q_len, k_len):
    scale and temperature, the mask's -inf, softmax, and the weighted values (..., q_len, d_v)."""
    q_len, k_len = scores.shape[-2:]
    scaled = scores * (scale / temperature)
    masked = scaled if mask is None else scaled.masked_fill(~mask, float("-inf"))
    weights = masked_softmax(scaled, mask)
    return Trace(
        variant=variant,
        output=weights @ v,
        weights=weights,
        scores=scores,
        scaled_scores=scaled,
        masked_scores=masked,
        scale=scale,
        temperature=temperature,
        cost=Cost(q_len * k_len, q_len * k_len, q_len * k_len),
        stages=stages or {},
    )
