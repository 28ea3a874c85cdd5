"""Older scoring functions: additive (Bahdanau) and general bilinear (Luong)."""

from __future__ import annotations

import torch
from torch import Tensor

from attention_core.sdpa import masked_softmax
from attention_core.validation import check_mask, check_qkv


def additive_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    v_a: Tensor,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Bahdanau: score(i, j) = v_a · tanh(W_q q_i + W_k k_j).

    q: (..., q_len, d_q), k: (..., k_len, d_k), v: (..., k_len, d_v);
    w_q: (d_attn, d_q), w_k: (d_attn, d_k), v_a: (d_attn,).
    Returns (output (..., q_len, d_v), weights (..., q_len, k_len), scores (..., q_len, k_len)).
    """
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} need the same length")
    if w_q.shape[1] != q.shape[-1] or w_k.shape[1] != k.shape[-1] or w_q.shape[0] != w_k.shape[0]:
        raise ValueError(
            f"w_q {tuple(w_q.shape)} / w_k {tuple(w_k.shape)} do not fit q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if v_a.shape != (w_q.shape[0],):
        raise ValueError(f"v_a must be ({w_q.shape[0]},); got {tuple(v_a.shape)}")
    if mask is not None:
        check_mask(mask, q.shape[:-2], q.shape[-2], k.shape[-2])
    hidden = torch.tanh(
        (q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)
    )  # (..., q_len, k_len, d_attn)
    scores = hidden @ v_a  # (..., q_len, k_len)
    weights = masked_softmax(scores, mask)
    return weights @ v, weights, scores


def general_attention(
    q: Tensor, k: Tensor, v: Tensor, w: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Luong's general score: score(i, j) = q_i^T W k_j (no 1/sqrt(d) scale).

    q: (..., q_len, d_q), k: (..., k_len, d_k), v: (..., k_len, d_v), w: (d_q, d_k).
    Returns (output, weights, scores) as additive_attention does.
    """
    if w.shape != (q.shape[-1], k.shape[-1]):
        raise ValueError(
            f"w must be (d_q, d_k) = ({q.shape[-1]}, {k.shape[-1]}); got {tuple(w.shape)}"
        )
    check_qkv(q @ w, k, v)
    if mask is not None:
        check_mask(mask, q.shape[:-2], q.shape[-2], k.shape[-2])
    scores = (q @ w) @ k.transpose(-2, -1)  # (..., q_len, k_len)
    weights = masked_softmax(scores, mask)
    return weights @ v, weights, scores
