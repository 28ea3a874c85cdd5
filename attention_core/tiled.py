"""Tiled attention with the online softmax (FlashAttention's algorithm), in plain PyTorch.

Keys and values are visited one block at a time; each query block keeps only a running
row maximum m, a running denominator l and an unnormalised output acc, so the largest
score matrix ever held is (block_q, block_k) instead of (q_len, k_len).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attention_core.sdpa import Scale, resolve_scale
from attention_core.validation import check_mask, check_qkv


@dataclass(frozen=True)
class TiledResult:
    """Output of tiled attention and what it cost."""

    output: Tensor  # (..., q_len, d_v)
    logsumexp: Tensor  # (..., q_len): log of each row's softmax denominator (-inf if fully masked)
    max_block_elements: int  # largest score block held at once, per batch-head
    full_elements: int  # q_len * k_len: what exact attention holds
    blocks_computed: int  # score blocks actually computed
    blocks_skipped: int  # blocks skipped because the mask forbids all of them


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    block_q: int = 64,
    block_k: int = 64,
    causal: bool = False,
    scale: Scale = True,
) -> TiledResult:
    """Exact attention computed block by block with an online softmax.

    q: (..., q_len, d_k), k: (..., k_len, d_k), v: (..., k_len, d_v);
    mask: bool broadcastable to (..., q_len, k_len); causal adds j <= i.
    Equals softmax(q k^T * scale, masked) @ v; fully masked rows give 0.
    """
    check_qkv(q, k, v)
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be >= 1; got block_q={block_q}, block_k={block_k}")
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask is not None:
        check_mask(mask, q.shape[:-2], q_len, k_len)
    scale_value = resolve_scale(scale, q.shape[-1])
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    dtype = q.dtype
    neg_inf = torch.tensor(float("-inf"), dtype=dtype)

    outputs, lses = [], []
    max_block, computed, skipped = 0, 0, 0
    for q0 in range(0, q_len, block_q):
        q_blk = q[..., q0 : q0 + block_q, :]  # (..., bq, d)
        bq = q_blk.shape[-2]
        m = torch.full((*batch_shape, bq, 1), float("-inf"), dtype=dtype)  # running row max
        denom = torch.zeros((*batch_shape, bq, 1), dtype=dtype)  # running sum of exp
        acc = torch.zeros((*batch_shape, bq, v.shape[-1]), dtype=dtype)  # unnormalised output
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
                i = torch.arange(q0, q0 + bq).unsqueeze(1)
                j = torch.arange(k0, k0 + k_blk.shape[-2]).unsqueeze(0)
                future_ok = j <= i
                allowed = future_ok if allowed is None else allowed & future_ok
            if allowed is not None and not allowed.any():
                skipped += 1
                continue
            s = (q_blk @ k_blk.transpose(-2, -1)) * scale_value  # (..., bq, bk)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            computed += 1
            max_block = max(max_block, s.shape[-2] * s.shape[-1])

            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            # Rows that have seen no allowed key yet keep m = -inf; shift by 0 there.
            shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros((), dtype=dtype))
            p = torch.exp(s - shift)  # (..., bq, bk), 0 where masked
            correction = torch.exp(torch.where(torch.isfinite(m), m - shift, neg_inf))
            denom = denom * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ v_blk
            m = m_new
        safe = denom > 0
        outputs.append(torch.where(safe, acc / torch.where(safe, denom, 1), 0))
        lses.append(torch.where(safe, m + torch.log(torch.where(safe, denom, 1)), neg_inf)[..., 0])

    return TiledResult(
        output=torch.cat(outputs, dim=-2),
        logsumexp=torch.cat(lses, dim=-1),
        max_block_elements=max_block,
        full_elements=q_len * k_len,
        blocks_computed=computed,
        blocks_skipped=skipped,
    )
