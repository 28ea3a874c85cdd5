"""Older scoring functions: additive (Bahdanau) and general bilinear (Luong).

Both take the call shape of every variant; neither scales its scores by default (scale=True
means 1 here), and a temperature divides the scores as in scaled dot-product attention.
"""

from __future__ import annotations

from torch import Tensor

from attention_core.sdpa import softmax_trace
from attention_core.trace import (
    Scale,
    Trace,
    check_temperature,
    combined_mask,
    resolve_scale,
)
from attention_core.validation import check_mask, check_qkv


def additive_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: Scale = True,
    temperature: float = 1.0,
    w_q: Tensor,
    w_k: Tensor,
    v_a: Tensor,
) -> Trace:
    """Bahdanau: score(i, j) = v_a · tanh(W_q q_i + W_k k_j).

    q: (..., q_len, d_q), k: (..., k_len, d_k), v: (..., k_len, d_v);
    w_q: (d_attn, d_q), w_k: (d_attn, d_k), v_a: (d_attn,).
    stages["hidden"]: tanh(W_q q_i + W_k k_j), (..., q_len, k_len, d_attn).
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
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask is not None:
        check_mask(mask, q.shape[:-2], q_len, k_len)
    temperature = check_temperature(temperature)
    scale_value = resolve_scale(scale, q.shape[-1], default=1.0)
    mask = combined_mask(mask, causal, q_len, k_len, q.device)
    hidden = (q @ w_q.T).unsqueeze(-2) + (k @ w_k.T).unsqueeze(-3)  # (..., q_len, k_len, d_attn)
    hidden = hidden.tanh()
    scores = hidden @ v_a  # (..., q_len, k_len)
    return softmax_trace("additive", scores, v, mask, scale_value, temperature, {"hidden": hidden})


def general_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: Scale = True,
    temperature: float = 1.0,
    w: Tensor,
) -> Trace:
    """Luong's general score: score(i, j) = q_i^T W k_j (no 1/sqrt(d) scale by default).

    q: (..., q_len, d_q), k: (..., k_len, d_k), v: (..., k_len, d_v), w: (d_q, d_k).
    stages["qw"]: q @ W, (..., q_len, d_k).
    """
    if w.shape != (q.shape[-1], k.shape[-1]):
        raise ValueError(
            f"w must be (d_q, d_k) = ({q.shape[-1]}, {k.shape[-1]}); got {tuple(w.shape)}"
        )
    qw = q @ w  # (..., q_len, d_k)
    check_qkv(qw, k, v)
    q_len, k_len = q.shape[-2], k.shape[-2]
    if mask is not None:
        check_mask(mask, q.shape[:-2], q_len, k_len)
    temperature = check_temperature(temperature)
    scale_value = resolve_scale(scale, q.shape[-1], default=1.0)
    mask = combined_mask(mask, causal, q_len, k_len, q.device)
    scores = qw @ k.transpose(-2, -1)  # (..., q_len, k_len)
    return softmax_trace("general", scores, v, mask, scale_value, temperature, {"qw": qw})
