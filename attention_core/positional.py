"""Positional encodings: the original sinusoids, and rotary embeddings (RoPE) for q and k."""

from __future__ import annotations

import torch
from torch import Tensor


def sinusoidal_encoding(n_positions: int, d_model: int, *, base: float = 10000.0) -> Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(same). (n_positions, d_model)."""
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal encodings; got {d_model}")
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (n, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    angle = position / base ** (two_i / d_model)  # (n, d/2)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


def rope_inverse_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """theta_i = base^(-2i/head_dim) for i < head_dim/2. (head_dim/2,)."""
    if head_dim % 2:
        raise ValueError(f"head_dim must be even for RoPE; got {head_dim}")
    return 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)


def rope_cos_sin(
    positions: Tensor, head_dim: int, *, base: float = 10000.0, inv_freq: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """cos and sin tables for the given positions, in the half-split layout Llama uses.

    positions: (seq,) or (batch, seq) -> cos, sin: same leading dims + (head_dim,).
    Pass inv_freq to reuse a model's own frequencies (for example with RoPE scaling).
    """
    if inv_freq is None:
        inv_freq = rope_inverse_frequencies(head_dim, base).to(positions.device)
    angles = positions.float().unsqueeze(-1) * inv_freq.float()  # (..., seq, head_dim/2)
    emb = torch.cat((angles, angles), dim=-1)  # (..., seq, head_dim)
    return emb.cos(), emb.sin()


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate q or k by position. x: (batch, heads, seq, head_dim); cos, sin: (seq, head_dim)
    or (batch, seq, head_dim). Returns x's shape."""
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (batch, 1, seq, head_dim)
    return x * cos + rotate_half(x) * sin


def sinusoidal_shift_matrix(offset: int, d_model: int, *, base: float = 10000.0) -> Tensor:
    """The linear map M with PE[pos + offset] = M @ PE[pos] for every pos: (d_model, d_model).

    Each (sin, cos) pair of frequency w turns by the angle offset * w, so M is block-diagonal
    with 2 x 2 rotations and depends on the offset only (never on pos): a fixed layer can learn
    to look `offset` positions away."""
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal encodings; got {d_model}")
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    angle = offset / base ** (two_i / d_model)  # (d/2,)
    cos, sin = torch.cos(angle), torch.sin(angle)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    # sin(a + b) = sin a cos b + cos a sin b;  cos(a + b) = cos a cos b - sin a sin b
    m[idx, idx], m[idx, idx + 1] = cos, sin
    m[idx + 1, idx], m[idx + 1, idx + 1] = -sin, cos
    return m


def rope_scores_by_position(q: Tensor, k: Tensor, n_positions: int, *, base: float = 10000.0):
    """One query vector and one key vector placed at every position: q_i · k_j after RoPE.

    q, k: (head_dim,) -> (n_positions, n_positions), entry [i, j] = rope(q, i) · rope(k, j).
    RoPE makes it a function of i - j alone: constant along every diagonal."""
    inv_freq = rope_inverse_frequencies(q.shape[-1], base).to(q.device, q.dtype)  # (hd/2,)
    angles = (
        torch.arange(n_positions, dtype=q.dtype, device=q.device).unsqueeze(-1) * inv_freq
    )  # (n, hd/2)
    emb = torch.cat((angles, angles), dim=-1)  # (n, hd), in q's dtype (float64 stays exact)
    cos, sin = emb.cos(), emb.sin()
    q_at = apply_rope(q.expand(1, 1, n_positions, -1), cos, sin)[0, 0]  # (n, hd)
    k_at = apply_rope(k.expand(1, 1, n_positions, -1), cos, sin)[0, 0]  # (n, hd)
    return q_at @ k_at.T
