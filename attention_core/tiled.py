"""Tiled attention with the online softmax (FlashAttention's algorithm), in plain PyTorch.

Keys and values are visited one block at a time; each query block keeps only a running
row maximum m, a running denominator l and an unnormalised output acc, so the largest
score matrix ever held is (block_q, block_k) instead of (q_len, k_len).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention_core.trace import Cost, Scale, Trace, check_temperature, resolve_scale
from attention_core.validation import check_mask, check_qkv


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: Scale = True,
    temperature: float = 1.0,
    block_q: int = 64,
    block_k: int = 64,
) -> Trace:
    """Exact attention computed block by block with an online softmax.

    q: (..., q_len, d_k), k: (..., k_len, d_k), v: (..., k_len, d_v);
    mask: bool broadcastable to (..., q_len, k_len); causal adds j <= i.
    Equals softmax(q k^T * scale / temperature, masked) @ v; fully masked rows give 0.
    The trace holds no dense stage (no tile outlives its step): stages["logsumexp"] is each
    row's log softmax denominator, (..., q_len), -inf for fully masked rows.
    """
    check_qkv(q, k, v)
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be >= 1; got block_q={block_q}, block_k={block_k}")
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask is not None:
        check_mask(mask, q.shape[:-2], q_len, k_len)
    temperature = check_temperature(temperature)
    scale_value = resolve_scale(scale, q.shape[-1])
    factor = scale_value / temperature
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    dtype, device = q.dtype, q.device
    neg_inf = torch.tensor(float("-inf"), dtype=dtype, device=device)
    zero = torch.zeros((), dtype=dtype, device=device)

    outputs, lses = [], []
    max_block, computed, skipped, computed_pairs = 0, 0, 0, 0
    for q0 in range(0, q_len, block_q):
        q_blk = q[..., q0 : q0 + block_q, :]  # (..., bq, d)
        bq = q_blk.shape[-2]
        m = torch.full((*batch_shape, bq, 1), float("-inf"), dtype=dtype, device=device)  # row max
        denom = torch.zeros((*batch_shape, bq, 1), dtype=dtype, device=device)  # sum of exp
        acc = torch.zeros((*batch_shape, bq, v.shape[-1]), dtype=dtype, device=device)  # output
        for k0 in range(0, k_len, block_k):
            if causal and k0 > q0 + bq - 1:
                skipped += 1  # every key in this block lies in the future of every query
                continue
            k_blk = k[..., k0 : k0 + block_k, :]
            v_blk = v[..., k0 : k0 + block_k, :]
            allowed = None
            if mask is not None:
                allowed = mask[..., q0 : q0 + block_q, k0 : k0 + block_k]
            if causal:
                i = torch.arange(q0, q0 + bq, device=device).unsqueeze(1)
                j = torch.arange(k0, k0 + k_blk.shape[-2], device=device).unsqueeze(0)
                future_ok = j <= i
                allowed = future_ok if allowed is None else allowed & future_ok
            if allowed is not None and not allowed.any():
                skipped += 1
                continue
            s = (q_blk @ k_blk.transpose(-2, -1)) * factor  # (..., bq, bk)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            computed += 1
            max_block = max(max_block, s.shape[-2] * s.shape[-1])
            computed_pairs += s.shape[-2] * s.shape[-1]

            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            # Rows that have seen no allowed key yet keep m = -inf; shift by 0 there.
            shift = torch.where(torch.isfinite(m_new), m_new, zero)
            p = torch.exp(s - shift)  # (..., bq, bk), 0 where masked
            correction = torch.exp(torch.where(torch.isfinite(m), m - shift, neg_inf))
            denom = denom * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ v_blk
            m = m_new
        safe = denom > 0
        outputs.append(torch.where(safe, acc / torch.where(safe, denom, 1), zero))
        lses.append(torch.where(safe, m + torch.log(torch.where(safe, denom, 1)), neg_inf)[..., 0])

    return Trace(
        variant="tiled",
        output=torch.cat(outputs, dim=-2),
        weights=None,
        scores=None,
        scaled_scores=None,
        masked_scores=None,
        scale=scale_value,
        temperature=temperature,
        cost=Cost(
            pairs_computed=computed_pairs,
            pairs_full=q_len * k_len,
            max_block_elements=max_block,
            blocks_computed=computed,
            blocks_skipped=skipped,
        ),
        stages={"logsumexp": torch.cat(lses, dim=-1)},
    )
