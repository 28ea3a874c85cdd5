"""Shape checks shared by the attention variants; errors name the shapes they saw."""

from __future__ import annotations

import torch
from torch import Tensor


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """q: (..., q_len, d_k), k: (..., k_len, d_k), v: (..., k_len, d_v)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() < 2:
            raise ValueError(
                f"{name} needs at least 2 dims (seq_len, dim); got shape {tuple(t.shape)}"
            )
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor; got dtype {t.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share their last dim d_k; got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions; got k {tuple(k.shape)} "
            f"and v {tuple(v.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"batch/head dims of q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} "
            "do not broadcast"
        ) from err


def check_mask(mask: Tensor, batch_shape: torch.Size, q_len: int, k_len: int) -> None:
    """mask: bool, broadcastable to (*batch_shape, q_len, k_len)."""
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be a boolean tensor (True = may attend); got dtype {mask.dtype}"
        )
    target = (*batch_shape, q_len, k_len)
    try:
        torch.broadcast_shapes(mask.shape, target)
    except RuntimeError as err:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention pattern "
            f"{target}"
        ) from err
    if mask.dim() >= 2 and (mask.shape[-2] not in (1, q_len) or mask.shape[-1] not in (1, k_len)):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not fit q_len={q_len}, k_len={k_len}"
        )
