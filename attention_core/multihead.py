"""Multi-head attention with its own projections, including GQA, MQA and cross-attention."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attention_core.heads import merge_heads, repeat_kv, split_heads
from attention_core.sdpa import AttentionTrace, Scale, scaled_dot_product_attention


@dataclass(frozen=True)
class AttentionProjections:
    """Weights in nn.Linear's layout (y = x W^T + b).

    w_q: (n_heads * head_dim, d_model)       w_k, w_v: (n_kv_heads * head_dim, d_kv)
    w_o: (d_model, n_heads * head_dim)       biases optional, shaped like the output rows.
    """

    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    w_o: Tensor
    b_q: Tensor | None = None
    b_k: Tensor | None = None
    b_v: Tensor | None = None
    b_o: Tensor | None = None

    @classmethod
    def random(
        cls,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        d_kv: int | None = None,
        bias: bool = False,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> AttentionProjections:
        """Seeded random projections with std 1/sqrt(fan_in), for demos and tests."""
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        d_kv = d_model if d_kv is None else d_kv
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        head_dim = d_model // n_heads
        g = torch.Generator().manual_seed(seed)

        def weight(rows: int, cols: int) -> Tensor:
            return torch.randn(rows, cols, generator=g, dtype=dtype) / cols**0.5

        def maybe_bias(rows: int) -> Tensor | None:
            return torch.randn(rows, generator=g, dtype=dtype) * 0.1 if bias else None

        return cls(
            w_q=weight(n_heads * head_dim, d_model),
            w_k=weight(n_kv_heads * head_dim, d_kv),
            w_v=weight(n_kv_heads * head_dim, d_kv),
            w_o=weight(d_model, n_heads * head_dim),
            b_q=maybe_bias(n_heads * head_dim),
            b_k=maybe_bias(n_kv_heads * head_dim),
            b_v=maybe_bias(n_kv_heads * head_dim),
            b_o=maybe_bias(d_model),
        )


@dataclass(frozen=True)
class MultiHeadResult:
    """One multi-head attention call. Per-head tensors are (batch, heads, seq, head_dim)."""

    output: Tensor  # (batch, q_len, d_model), after W_o
    q: Tensor  # (batch, n_heads, q_len, head_dim)
    k: Tensor  # (batch, n_kv_heads, k_len, head_dim), before sharing across query heads
    v: Tensor  # (batch, n_kv_heads, k_len, head_dim)
    trace: AttentionTrace  # per-head stages; weights (batch, n_heads, q_len, k_len)

    @property
    def weights(self) -> Tensor:
        """(batch, n_heads, q_len, k_len)."""
        return self.trace.weights


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    y = x @ w.T
    return y if b is None else y + b


def multi_head_attention(
    x_q: Tensor,
    x_kv: Tensor | None,
    proj: AttentionProjections,
    n_heads: int,
    n_kv_heads: int | None = None,
    mask: Tensor | None = None,
    *,
    scale: Scale = True,
    temperature: float = 1.0,
) -> MultiHeadResult:
    """Multi-head attention; x_kv=None means self-attention, otherwise cross-attention.

    x_q: (batch, q_len, d_model); x_kv: (batch, k_len, d_kv).
    n_kv_heads must divide n_heads: equal is MHA, 1 is MQA, in between is GQA.
    mask: bool broadcastable to (batch, n_heads, q_len, k_len).
    """
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    if x_q.dim() != 3:
        raise ValueError(f"x_q must be (batch, q_len, d_model); got shape {tuple(x_q.shape)}")
    x_kv = x_q if x_kv is None else x_kv
    if x_kv.dim() != 3 or x_kv.shape[0] != x_q.shape[0]:
        raise ValueError(
            f"x_kv must be (batch, k_len, d_kv) with the batch of x_q {tuple(x_q.shape)}; "
            f"got {tuple(x_kv.shape)}"
        )
    if proj.w_q.shape[1] != x_q.shape[-1] or proj.w_k.shape[1] != x_kv.shape[-1]:
        raise ValueError(
            f"projection inputs {tuple(proj.w_q.shape)}/{tuple(proj.w_k.shape)} do not match "
            f"x_q {tuple(x_q.shape)} / x_kv {tuple(x_kv.shape)}"
        )

    q = split_heads(_linear(x_q, proj.w_q, proj.b_q), n_heads)  # (B, H, Tq, hd)
    k = split_heads(_linear(x_kv, proj.w_k, proj.b_k), n_kv_heads)  # (B, Hkv, Tk, hd)
    v = split_heads(_linear(x_kv, proj.w_v, proj.b_v), n_kv_heads)  # (B, Hkv, Tk, hd)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"query head_dim {q.shape[-1]} != key head_dim {k.shape[-1]}")
    n_rep = n_heads // n_kv_heads
    trace = scaled_dot_product_attention(
        q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask, scale=scale, temperature=temperature
    )
    output = _linear(merge_heads(trace.output), proj.w_o, proj.b_o)  # (B, Tq, d_model)
    return MultiHeadResult(output=output, q=q, k=k, v=v, trace=trace)
