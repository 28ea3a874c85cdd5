"""Tiled attention with the online softmax (FlashAttention's algorithm), in plain PyTorch.

Keys and values are visited one block at a time; each query block keeps only a running
row maximum m, a running denominator l and an unnormalised output acc, so the largest
score matrix ever held is (block_q, block_k) instead of (q_len, k_len).

`tile_steps` yields every step with the state it leaves (for teaching: the lab page steps
through them); `tiled_attention` runs on the same steps and keeps only each block's last.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from attention_core.trace import Cost, Scale, Trace, check_temperature, resolve_scale
from attention_core.validation import check_mask, check_qkv


@dataclass(frozen=True)
class TileStep:
    """One (query block, key block) step of the online softmax, and the state it leaves.

    Rows are the block's queries: vectors are (..., bq), matrices (..., bq, bk) or (..., bq, d_v).
    scores: the tile's logits (scale / temperature applied, -inf where masked); None when the
    tile was skipped because the mask forbids all of it (the state is then unchanged).
    correction: exp(m_before - m_after), what the old sum and output were multiplied by.
    """

    q_start: int
    q_stop: int
    k_start: int
    k_stop: int
    skipped: bool
    scores: Tensor | None
    row_max: Tensor  # m after this step, -inf for rows that have seen no allowed key
    row_sum: Tensor  # l after this step: sum of exp(score - m) over the keys seen
    correction: Tensor
    accumulator: Tensor  # unnormalised output: sum of exp(score - m) v
    last_for_block: bool  # the query block's final step: accumulator / row_sum is its output

    @property
    def partial_output(self) -> Tensor:
        """The output so far, as if the keys seen were all the keys (0 where none allowed)."""
        safe = self.row_sum > 0
        denom = torch.where(safe, self.row_sum, 1).unsqueeze(-1)
        return torch.where(safe.unsqueeze(-1), self.accumulator / denom, 0)

    @property
    def logsumexp(self) -> Tensor:
        """log of the softmax denominator so far, (..., bq); -inf where nothing is allowed."""
        safe = self.row_sum > 0
        return torch.where(
            safe, self.row_max + torch.log(torch.where(safe, self.row_sum, 1)), float("-inf")
        )


def tile_steps(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    factor: float,
    block_q: int,
    block_k: int,
) -> Iterator[TileStep]:
    """Every step of the online softmax over q: (..., q_len, d_k), k: (..., k_len, d_k),
    v: (..., k_len, d_v); logits are q k^T * factor. Arguments are checked by the caller."""
    q_len, k_len = q.shape[-2], k.shape[-2]
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    dtype, device = q.dtype, q.device
    neg_inf = torch.tensor(float("-inf"), dtype=dtype, device=device)
    zero = torch.zeros((), dtype=dtype, device=device)
    for q0 in range(0, q_len, block_q):
        q_blk = q[..., q0 : q0 + block_q, :]  # (..., bq, d)
        bq = q_blk.shape[-2]
        m = torch.full((*batch_shape, bq), float("-inf"), dtype=dtype, device=device)  # row max
        denom = torch.zeros((*batch_shape, bq), dtype=dtype, device=device)  # sum of exp
        acc = torch.zeros((*batch_shape, bq, v.shape[-1]), dtype=dtype, device=device)  # output
        starts = range(0, k_len, block_k)
        for k0 in starts:
            k_blk = k[..., k0 : k0 + block_k, :]
            v_blk = v[..., k0 : k0 + block_k, :]
            k1 = k0 + k_blk.shape[-2]
            last = k0 == starts[-1]
            allowed = None
            if mask is not None:
                allowed = mask[..., q0 : q0 + block_q, k0:k1]
            if causal:
                i = torch.arange(q0, q0 + bq, device=device).unsqueeze(1)
                j = torch.arange(k0, k1, device=device).unsqueeze(0)
                future_ok = j <= i  # (bq, bk)
                allowed = future_ok if allowed is None else allowed & future_ok
            if allowed is not None and not allowed.any():
                # Every pair in the tile is forbidden (for causal: all keys lie in the future).
                ones = torch.ones_like(denom)
                yield TileStep(q0, q0 + bq, k0, k1, True, None, m, denom, ones, acc, last)
                continue
            s = (q_blk @ k_blk.transpose(-2, -1)) * factor  # (..., bq, bk)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., bq)
            # Rows that have seen no allowed key yet keep m = -inf; shift by 0 there.
            shift = torch.where(torch.isfinite(m_new), m_new, zero)
            p = torch.exp(s - shift.unsqueeze(-1))  # (..., bq, bk), 0 where masked
            correction = torch.exp(torch.where(torch.isfinite(m), m - shift, neg_inf))
            denom = denom * correction + p.sum(dim=-1)
            acc = acc * correction.unsqueeze(-1) + p @ v_blk
            m = m_new
            yield TileStep(q0, q0 + bq, k0, k1, False, s, m, denom, correction, acc, last)


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

    outputs, lses = [], []
    max_block, computed, skipped, computed_pairs = 0, 0, 0, 0
    steps = tile_steps(
        q, k, v, mask, causal=causal, factor=scale_value / temperature,
        block_q=block_q, block_k=block_k,
    )  # fmt: skip
    for step in steps:
        if step.skipped:
            skipped += 1
        else:
            computed += 1
            cells = step.scores.shape[-2] * step.scores.shape[-1]
            max_block = max(max_block, cells)
            computed_pairs += cells
        if step.last_for_block:
            outputs.append(step.partial_output)
            lses.append(step.logsumexp)

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
