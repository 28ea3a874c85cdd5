"""Sparse attention: only the (query, key) pairs a mask allows are ever scored."""

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
from attention_core.validation import check_qkv


def sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: Scale = True,
    temperature: float = 1.0,
) -> Trace:
    """Attention that gathers, for each query, only the keys its row of the mask allows.

    q: (..., q_len, d_k), k: (..., k_len, d_k), v: (..., k_len, d_v);
    mask: bool (q_len, k_len), shared by all batches and heads (None: every pair); causal
    adds key j <= i. Equals dense masked attention; costs cost.pairs_computed dot products
    instead of q_len * k_len. The trace's weights are dense for display (0 where not
    computed); stages["key_index"] (q_len, width) lists each query's keys, padded, and
    stages["key_valid"] marks the padding False.
    """
    check_qkv(q, k, v)
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != (q_len, k_len)):
        raise ValueError(
            f"mask must be bool ({q_len}, {k_len}); got {mask.dtype} {tuple(mask.shape)}"
        )
    temperature = check_temperature(temperature)
    scale_value = resolve_scale(scale, q.shape[-1])
    mask = combined_mask(mask, causal, q_len, k_len, q.device)
    if mask is None:
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=q.device)
    width = max(int(mask.sum(dim=-1).max()), 1) if q_len else 1
    # For each query row, the indices of its allowed keys, padded to `width` (padding marked).
    order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)[:, :width]  # (q_len, w)
    valid = torch.gather(mask, 1, order)  # (q_len, w)

    k_sel = k[..., order, :]  # (..., q_len, w, d_k)
    v_sel = v[..., order, :]  # (..., q_len, w, d_v)
    scores = (k_sel @ q.unsqueeze(-1)).squeeze(-1) * (scale_value / temperature)  # (..., q_len, w)
    scores = scores.masked_fill(~valid, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(valid.any(dim=-1, keepdim=True), weights, 0)
    output = (weights.unsqueeze(-2) @ v_sel).squeeze(-2)  # (..., q_len, d_v)

    batch_shape = weights.shape[:-2]
    dense = torch.zeros((*batch_shape, q_len, k_len), dtype=weights.dtype, device=q.device)
    dense = dense.scatter_add(-1, order.expand(*batch_shape, q_len, width), weights)
    pairs = int(mask.sum())
    return Trace(
        variant="sparse",
        output=output,
        weights=dense,
        scores=None,
        scaled_scores=None,
        masked_scores=None,
        scale=scale_value,
        temperature=temperature,
        cost=Cost(pairs_computed=pairs, pairs_full=q_len * k_len, max_block_elements=q_len * width),
        stages={"key_index": order, "key_valid": valid},
    )
