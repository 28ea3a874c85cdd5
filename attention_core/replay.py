"""Replay a real model's attention from its own weights and the hidden states entering a layer.

Transformers only returns the softmax weights; replaying the layer from first principles also
gives the per-head queries and keys, raw and scaled scores, and counterfactuals (the same head
without the 1/sqrt(d) scale, or at another temperature). Family-specific weight extraction
lives with the model code (atlas_engine/models/families.py); this module is plain tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_core.heads import repeat_kv, split_heads
from attention_core.positional import apply_rope, rope_cos_sin
from attention_core.sdpa import AttentionTrace, Scale, masked_softmax, scaled_dot_product_attention


@dataclass(frozen=True)
class QKProjection:
    """One layer's query/key(/value) projections, in nn.Linear's layout (y = x W^T + b).

    w_q: (n_heads * head_dim, d_model), w_k and w_v: (n_kv_heads * head_dim, d_model).
    scale: the factor the model multiplies q·k by (1/sqrt(head_dim) for all three families,
    times 1/(layer+1) for GPT-2 checkpoints that set scale_attn_by_inverse_layer_idx).
    """

    w_q: Tensor
    w_k: Tensor
    b_q: Tensor | None
    b_k: Tensor | None
    n_heads: int
    n_kv_heads: int
    head_dim: int
    scale: float
    w_v: Tensor | None = None  # without values, a replay gives the pattern only
    b_v: Tensor | None = None


@dataclass(frozen=True)
class Rope:
    """Rotary position tables as the model computes them: cos, sin (seq, head_dim)."""

    cos: Tensor
    sin: Tensor

    @classmethod
    def from_inv_freq(cls, inv_freq: Tensor, seq_len: int, attention_scaling: float = 1.0) -> Rope:
        positions = torch.arange(seq_len, dtype=torch.float32, device=inv_freq.device)
        cos, sin = rope_cos_sin(positions, 2 * inv_freq.shape[0], inv_freq=inv_freq)  # (seq, hd)
        return cls(cos=cos * attention_scaling, sin=sin * attention_scaling)


@dataclass(frozen=True)
class LayerReplay:
    q: Tensor  # (batch, n_heads, seq, head_dim), after RoPE if the model uses it
    k: Tensor  # (batch, n_kv_heads, seq, head_dim), after RoPE, before sharing (GQA)
    v: Tensor | None  # (batch, n_kv_heads, seq, head_dim) when the projection has w_v
    trace: AttentionTrace  # patterns (batch, heads, seq, seq); output (batch, heads, seq, hd)

    def to(self, device: object) -> LayerReplay:
        """The same replay with every tensor on `device`."""
        v = None if self.v is None else self.v.to(device)
        return LayerReplay(
            q=self.q.to(device), k=self.k.to(device), v=v, trace=self.trace.to(device)
        )


def project_qk(
    hidden: Tensor, proj: QKProjection, rope: Rope | None = None
) -> tuple[Tensor, Tensor]:
    """hidden (batch, seq, d_model) -> q (batch, n_heads, seq, hd), k (batch, n_kv_heads, seq, hd).

    Projected with F.linear, the call nn.Linear makes, so the bias is added inside the same
    matrix product as in the model: `hidden @ w.T + b` rounds differently (MiniLM's maps came
    out up to 1.5e-6 away from transformers' own; with F.linear they are equal bit for bit).
    """
    q = F.linear(hidden, proj.w_q, proj.b_q)  # (B, T, H * hd)
    k = F.linear(hidden, proj.w_k, proj.b_k)  # (B, T, Hkv * hd)
    q = split_heads(q, proj.n_heads)  # (B, H, T, hd)
    k = split_heads(k, proj.n_kv_heads)  # (B, Hkv, T, hd)
    if rope is not None:
        q, k = apply_rope(q, rope.cos, rope.sin), apply_rope(k, rope.cos, rope.sin)
    return q, k


def project_v(hidden: Tensor, proj: QKProjection) -> Tensor:
    """hidden (batch, seq, d_model) -> v (batch, n_kv_heads, seq, head_dim); needs proj.w_v."""
    if proj.w_v is None:
        raise ValueError("this projection has no value weights (w_v)")
    v = F.linear(hidden, proj.w_v, proj.b_v)  # (B, T, Hkv * hd), as project_qk
    return split_heads(v, proj.n_kv_heads)  # (B, Hkv, T, hd)


def replay_layer(
    hidden: Tensor,
    proj: QKProjection,
    mask: Tensor | None,
    *,
    rope: Rope | None = None,
    scale: Scale = None,
    temperature: float = 1.0,
    heads: list[int] | None = None,
) -> LayerReplay:
    """Recompute one layer's attention pattern from the hidden states entering it.

    hidden: (batch, seq, d_model); mask: bool broadcastable to (batch, heads, seq, seq).
    scale=None uses the model's own factor; False gives the unscaled counterfactual.
    heads: restrict the trace to these query heads (all by default).
    Without w_v in the projection the trace's output has width 0 (pattern only).
    """
    q, k = project_qk(hidden, proj, rope)
    n_rep = proj.n_heads // proj.n_kv_heads
    if proj.w_v is not None:
        v = project_v(hidden, proj)  # (B, Hkv, T, hd)
        v_shared = repeat_kv(v, n_rep)  # (B, H, T, hd)
    else:
        v = None
        v_shared = hidden.new_zeros(1, proj.n_heads, hidden.shape[1], 0)  # (1, H, T, 0)
    k_shared = repeat_kv(k, n_rep)  # (B, H, T, hd)
    q_sel, k_sel, v_sel = q, k_shared, v_shared
    if heads is not None:
        q_sel, k_sel, v_sel = q[:, heads], k_shared[:, heads], v_shared[:, heads]
    trace = scaled_dot_product_attention(
        q_sel, k_sel, v_sel, mask, scale=scale, temperature=temperature, default_scale=proj.scale
    )
    return LayerReplay(q=q, k=k, v=v, trace=trace)


def replay_weights(
    hidden: Tensor,
    proj: QKProjection,
    mask: Tensor | None,
    *,
    rope: Rope | None = None,
    heads: list[int] | None = None,
) -> Tensor:
    """Only the attention weights of one layer, (heads, seq, seq), for hidden (1, seq, d_model).

    The same operations as replay_layer's trace (q k^T, times the model's scale, masked softmax),
    so the same values, but one head at a time: besides the answer it holds one head's scores,
    never the layer's raw, scaled and masked scores at once.
    """
    q, k = project_qk(hidden, proj, rope)  # (1, H, T, hd), (1, Hkv, T, hd)
    group = proj.n_heads // proj.n_kv_heads
    chosen = list(range(proj.n_heads)) if heads is None else heads
    seq = hidden.shape[1]
    out = q.new_empty(len(chosen), seq, seq)
    for i, head in enumerate(chosen):
        scores = q[0, head] @ k[0, head // group].transpose(-2, -1)  # (T, T)
        out[i] = masked_softmax(scores * proj.scale, mask)
    return out
