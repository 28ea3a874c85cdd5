"""Splitting a model dimension into heads, merging it back, and sharing K/V heads (GQA)."""

from __future__ import annotations

from torch import Tensor


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(batch, seq, n_heads * head_dim) -> (batch, n_heads, seq, head_dim)."""
    batch, seq, width = x.shape
    if width % n_heads:
        raise ValueError(
            f"width {width} of shape {tuple(x.shape)} is not divisible by {n_heads} heads"
        )
    return x.view(batch, seq, n_heads, width // n_heads).transpose(1, 2)  # (B, H, T, hd)


def merge_heads(x: Tensor) -> Tensor:
    """(batch, n_heads, seq, head_dim) -> (batch, seq, n_heads * head_dim)."""
    batch, n_heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * head_dim)  # (B, T, H*hd)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Share each key/value head with n_rep query heads: query head h uses kv head h // n_rep.

    (batch, n_kv_heads, seq, head_dim) -> (batch, n_kv_heads * n_rep, seq, head_dim).
    MQA is the case n_kv_heads = 1; n_rep = 1 is ordinary multi-head attention.
    """
    if n_rep < 1:
        raise ValueError(f"n_rep must be >= 1; got {n_rep}")
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep, dim=1)  # (B, Hkv * n_rep, T, hd)


def pool_kv_heads(weight: Tensor, n_kv_heads: int, to_heads: int) -> Tensor:
    """Mean-pool K or V projection heads into fewer, as the GQA paper converts a checkpoint.

    weight: (n_kv_heads * head_dim, ...) in nn.Linear layout (a bias is (n_kv_heads * head_dim,));
    consecutive groups of n_kv_heads / to_heads heads are averaged, so pooled head g serves the
    query heads that used heads g*r .. g*r + r - 1. Returns (to_heads * head_dim, ...)."""
    if to_heads < 1 or n_kv_heads % to_heads:
        raise ValueError(
            f"{to_heads} K/V heads cannot be pooled from {n_kv_heads}: it must divide it"
        )
    rows = weight.shape[0]
    if rows % n_kv_heads:
        raise ValueError(f"weight {tuple(weight.shape)} does not split into {n_kv_heads} heads")
    head_dim = rows // n_kv_heads
    grouped = weight.reshape(to_heads, n_kv_heads // to_heads, head_dim, *weight.shape[1:])
    return grouped.mean(dim=1).reshape(to_heads * head_dim, *weight.shape[1:])
