"""Sparse attention: only the (query, key) pairs a mask allows are ever scored."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attention_core.sdpa import Scale, resolve_scale
from attention_core.validation import check_qkv


@dataclass(frozen=True)
class SparseResult:
    output: Tensor  # (..., q_len, d_v)
    weights: Tensor  # (..., q_len, k_len), dense for display; zeros where not computed
    computed_pairs: int  # scores actually computed
    full_pairs: int  # q_len * k_len


def sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor, *, scale: Scale = True
) -> SparseResult:
    """Attention that gathers, for each query, only the keys its row of `mask` allows.

    q: (..., q_len, d_k), k: (..., k_len, d_k), v: (..., k_len, d_v);
    mask: bool (q_len, k_len), shared by all batches and heads.
    Equals dense masked attention; costs computed_pairs dot products instead of q_len*k_len.
    """
    check_qkv(q, k, v)
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask.dtype != torch.bool or tuple(mask.shape) != (q_len, k_len):
        raise ValueError(
            f"mask must be bool ({q_len}, {k_len}); got {mask.dtype} {tuple(mask.shape)}"
        )
    scale_value = resolve_scale(scale, q.shape[-1])
    width = max(int(mask.sum(dim=-1).max()), 1) if q_len else 1
    # For each query row, the indices of its allowed keys, padded to `width` (padding marked).
    order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)[:, :width]  # (q_len, w)
    valid = torch.gather(mask, 1, order)  # (q_len, w)

    k_sel = k[..., order, :]  # (..., q_len, w, d_k)
    v_sel = v[..., order, :]  # (..., q_len, w, d_v)
    scores = (k_sel @ q.unsqueeze(-1)).squeeze(-1) * scale_value  # (..., q_len, w)
    scores = scores.masked_fill(~valid, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(valid.any(dim=-1, keepdim=True), weights, 0)
    output = (weights.unsqueeze(-2) @ v_sel).squeeze(-2)  # (..., q_len, d_v)

    batch_shape = weights.shape[:-2]
    dense = torch.zeros((*batch_shape, q_len, k_len), dtype=weights.dtype)
    dense = dense.scatter_add(-1, order.expand(*batch_shape, q_len, width), weights)
    return SparseResult(
        output=output, weights=dense, computed_pairs=int(mask.sum()), full_pairs=q_len * k_len
    )
