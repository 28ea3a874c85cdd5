"""Kernelized linear attention: softmax(q k^T) replaced by phi(q) phi(k)^T.

With phi(x) = elu(x) + 1 (positive features), attention becomes
    out_i = phi(q_i)^T S / phi(q_i)^T z,   S = sum_j phi(k_j) v_j^T,   z = sum_j phi(k_j)
which costs O(n d^2) instead of O(n^2 d). The causal form uses prefix sums over j <= i.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_core.trace import Cost, Scale, Trace
from attention_core.validation import check_qkv


def elu_feature_map(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1, strictly positive. Same shape as x."""
    return F.elu(x) + 1


def _refuse_softmax_options(mask: Tensor | None, scale: Scale, temperature: float) -> None:
    if mask is not None:
        raise ValueError(
            "linear attention takes no mask: its sums run over every key, or over j <= i with "
            "causal=True (prefix sums)"
        )
    if scale not in (True, None) or temperature != 1.0:
        raise ValueError(
            "linear attention has no softmax, so scale and temperature do not apply to it"
        )


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: Scale = True,
    temperature: float = 1.0,
    implied_weights: bool = False,
) -> Trace:
    """Linear-time attention. q, k: (..., n, d_k), v: (..., n, d_v); output (..., n, d_v).

    stages: "phi_q", "phi_k" (the features) and "kv_state" (the sums S: (..., d_k, d_v), or
    their prefix sums (..., n, d_k, d_v) when causal). implied_weights=True also forms the
    (..., n, n) weights the same result implies (O(n^2): for display and tests only)."""
    check_qkv(q, k, v)
    _refuse_softmax_options(mask, scale, temperature)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal:
        if n_q != n_k:
            raise ValueError(
                f"causal linear attention needs q_len == k_len; got {q.shape}, {k.shape}"
            )
        kv = torch.cumsum(phi_k.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)  # (..., n, d_k, d_v)
        z = torch.cumsum(phi_k, dim=-2)  # (..., n, d_k)
        numerator = (phi_q.unsqueeze(-2) @ kv).squeeze(-2)  # (..., n, d_v)
        denominator = (phi_q * z).sum(dim=-1, keepdim=True)  # (..., n, 1)
    else:
        kv = phi_k.transpose(-2, -1) @ v  # (..., d_k, d_v)
        z = phi_k.sum(dim=-2)  # (..., d_k)
        numerator = phi_q @ kv
        denominator = phi_q @ z.unsqueeze(-1)  # (..., n, 1)
    weights = linear_attention_weights(q, k, causal=causal) if implied_weights else None
    return Trace(
        variant="linear",
        output=numerator / denominator,
        weights=weights,
        scores=None,
        scaled_scores=None,
        masked_scores=None,
        scale=None,
        temperature=1.0,
        cost=Cost(pairs_computed=0, pairs_full=n_q * n_k, max_block_elements=0),
        stages={"phi_q": phi_q, "phi_k": phi_k, "kv_state": kv},
    )


def linear_attention_weights(q: Tensor, k: Tensor, *, causal: bool = False) -> Tensor:
    """The (..., q_len, k_len) weight matrix linear attention implies, rows summing to 1."""
    scores = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)  # (..., q_len, k_len)
    if causal:
        n_q, n_k = scores.shape[-2:]
        scores = scores * torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
    return scores / scores.sum(dim=-1, keepdim=True)


def linear_attention_reference(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False) -> Tensor:
    """The same result through the explicit quadratic form, O(n^2). Shapes as linear_attention."""
    check_qkv(q, k, v)
    return linear_attention_weights(q, k, causal=causal) @ v
