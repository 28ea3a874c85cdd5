"""What modern heads add to q k^T: softcapped scores (Gemma 2), attention sinks (gpt-oss), a
position bias added to the scores (T5), and masks that differ by layer (sliding windows).

One head's weights, in the order transformers' eager functions apply them:

    s = q k^T * scale                              (T_q, T_k)
    s = tanh(s / softcap) * softcap                where softcap is set
    s = s + bias                                   where a bias is set
    s = the dtype's lowest value where `allowed` is False (what eager's additive mask leaves)
    w = softmax(s)                                 or, with a sink logit z:
    w = softmax([s - m, z - m])[:, :-1]            m = the row's largest of s and z

With a sink the row's weights sum to less than 1: the sink takes the rest and writes nothing.
They are never renormalised here (a view says so instead). Each step matches the family's
eager function operation for operation, so the weights are equal bit for bit in float32
(tests/attention_core/test_modern.py holds it against Gemma 2, gpt-oss and T5's own).
"""

from __future__ import annotations

import torch
from torch import Tensor


def head_logits(
    q: Tensor,
    k: Tensor,
    scale: float,
    *,
    softcap: float | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """q (..., T_q, d), k (..., T_k, d) -> (..., T_q, T_k): the scores a head's softmax reads,
    before the mask: scaled, capped where `softcap`, plus `bias` (broadcastable)."""
    return modern_logits(head_scores(q, k) * scale, softcap=softcap, bias=bias)


def as_4d(fn, a: Tensor, b: Tensor) -> Tensor:
    """fn(a, b) computed on 4-D views, as transformers' eager functions compute it: CPU kernels
    round a 2-D matmul differently from a (batch, heads, ...) one of the same numbers."""
    lead = a.shape[:-2]
    a4 = a.reshape(-1, 1, *a.shape[-2:]) if a.dim() != 4 else a
    b4 = b.reshape(-1, 1, *b.shape[-2:]) if b.dim() != 4 else b
    out = fn(a4, b4)
    return out if a.dim() == 4 else out.reshape(*lead, *out.shape[-2:])


def head_scores(q: Tensor, k: Tensor) -> Tensor:
    """q (..., T_q, d) · k (..., T_k, d) -> (..., T_q, T_k): the raw scores q k^T."""
    return as_4d(lambda a, b: torch.matmul(a, b.transpose(-2, -1)), q, k)


def head_output(weights: Tensor, v: Tensor) -> Tensor:
    """weights (..., T_q, T_k) × v (..., T_k, d_v) -> (..., T_q, d_v): what the head writes."""
    return as_4d(torch.matmul, weights, v)


def modern_logits(
    scaled: Tensor, *, softcap: float | None = None, bias: Tensor | None = None
) -> Tensor:
    """Scaled scores (..., T_q, T_k) capped where `softcap` and plus `bias` where given."""
    if softcap is not None:
        scaled = torch.tanh(scaled / softcap) * softcap
    if bias is not None:
        scaled = scaled + bias
    return scaled


def sink_softmax(logits: Tensor, allowed: Tensor | None, sink: Tensor | None) -> Tensor:
    """Softmax over the last dim of (..., T_q, T_k) logits, where `allowed` (broadcastable
    bool) is False the logit made the dtype's lowest value as eager attention's additive mask
    makes it (so a row with no allowed key is uniform, as the model computes it), with a sink
    logit per row where `sink` is given (a scalar tensor, or (heads,) for stacked heads)."""
    if allowed is not None:
        logits = logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
    if sink is None:
        return torch.softmax(logits, dim=-1)
    column = sink.to(logits.dtype)
    if column.dim():
        column = column.reshape(*column.shape, 1, 1)
    combined = torch.cat([logits, column.expand(*logits.shape[:-1], 1)], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    return torch.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]


def head_weights(
    q: Tensor,
    k: Tensor,
    scale: float,
    allowed: Tensor | None = None,
    *,
    softcap: float | None = None,
    sink: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """One head's (or a stack of heads') attention weights (..., T_q, T_k) in q's dtype: the
    module docstring's steps. allowed: bool broadcastable, True = may attend; None = every key."""
    logits = head_logits(q, k, scale, softcap=softcap, bias=bias)
    return sink_softmax(logits, allowed, sink)
