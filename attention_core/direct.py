"""Direct effects on a logit: what one piece of the residual stream adds to it, read through a
norm whose scale is frozen at its value on the real pass.

A pre-norm transformer's last residual stream at a position is a sum of what wrote into it,
r = Σ_c c (the embeddings, each head, each MLP, each bias). The logits are
W_U · norm(r) + b_U, and an elementwise-affine norm is

    norm(r) = center(r) · s ⊙ γ + β      s = 1 / σ(r)  (LayerNorm: center subtracts the mean,
                                                        σ is the standard deviation; RMSNorm:
                                                        no centering, σ is the root mean square)

Only s depends on r as a whole. Freezing s at the real pass's value (TransformerLens's
convention) makes norm linear in each piece: c's direct contribution to a logit is
c · d, with the direction d = s · center(γ ⊙ u) for the unembedding row u, and the pieces plus
the bias terms β · u + b_U sum to the real logit exactly (to float rounding). The same holds for
a norm applied to one sublayer's output before the residual adds it (Gemma 2 and 3, OLMo 2).

Shapes: d_model vectors are (..., d); one position's pieces (n, d).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def centered(x: Tensor) -> Tensor:
    """x - its mean over the last dimension: (..., d) -> (..., d)."""
    return x - x.mean(dim=-1, keepdim=True)


@dataclass(frozen=True)
class AffineNorm:
    """An elementwise-affine norm, y = center(x) · s(x) ⊙ gamma + beta (center only where
    `centers`), as read off its module (atlas_engine.inference.residual.fit_norm)."""

    gamma: Tensor  # (d,)
    beta: Tensor  # (d,)
    centers: bool  # LayerNorm: True; RMSNorm: False

    def _center(self, x: Tensor) -> Tensor:
        return centered(x) if self.centers else x

    def scale(self, x: Tensor, y: Tensor) -> Tensor:
        """The scale s the norm applied at each position, read back from its input x and its
        output y, both (..., d): the least-squares s of y - beta = center(x) · s ⊙ gamma,
        computed in float64 (no epsilon or formula of the norm's own is assumed). (...,)"""
        basis = self._center(x.double()) * self.gamma.double()
        target = y.double() - self.beta.double()
        return (basis * target).sum(-1) / (basis * basis).sum(-1).clamp_min(1e-300)

    def apply(self, x: Tensor, s: Tensor) -> Tensor:
        """The norm of x with its scale frozen at s: (..., d), s (...,) -> (..., d)."""
        return self._center(x) * s.unsqueeze(-1) * self.gamma + self.beta

    def linear(self, c: Tensor, s: Tensor) -> Tensor:
        """What a piece c of the norm's input contributes to its output, the scale frozen at s
        (beta left out: it is a bias term of its own). (..., d), s (...,) or () -> (..., d)."""
        return self._center(c) * s.unsqueeze(-1) * self.gamma

    def backward(self, x: Tensor, s: Tensor, g: Tensor) -> Tensor:
        """The gradient with respect to the norm's input of <g, output>, its scale s = (mean of
        center(x)² + eps)^(-1/2) moving with x (the true gradient, not the frozen one): with
        c = center(x) and u = g ⊙ gamma, s · center(u) - s³ · c · (u · c) / d, since ds/dx
        = -s³ c / d whatever eps is. x (T, d), s (T,), g (..., T, d) -> (..., T, d)."""
        c = self._center(x)
        u = g * self.gamma
        inner = (u * c).sum(-1, keepdim=True)  # (..., T, 1)
        scale = s.unsqueeze(-1)
        return scale * self._center(u) - scale**3 * c * inner / x.shape[-1]

    def reads(self, u: Tensor, s: Tensor) -> Tensor:
        """The direction d with linear(c, s) · u == c · d for every c: s · center(gamma ⊙ u).
        u (d,), s () -> (d,)."""
        return self._center(self.gamma * u) * s


def logit_direction(unembed: Tensor, target: int, contrast: int | None) -> Tensor:
    """The unembedding row of `target`, minus `contrast`'s for a logit difference, in float64
    (only those rows are converted). unembed (vocab, d) -> (d,)."""
    u = unembed[target].double()
    return u if contrast is None else u - unembed[contrast].double()


def head_writes(out: Tensor, project) -> tuple[Tensor, Tensor]:
    """What each head writes into the residual stream at one position, through the layer's
    output projection `project` ((..., heads · head_dim) -> (..., d), with its bias).

    out: (heads, head_dim), the heads' outputs at the position (before the projection).
    Returns (writes (heads, d): head h's share, project(out with only h's columns) minus the
    bias; bias (d,): project(0)). writes.sum(0) + bias == project(out.flatten()) up to rounding:
    the projection is linear."""
    heads, head_dim = out.shape
    alone = torch.zeros(heads + 1, heads, head_dim, dtype=out.dtype, device=out.device)
    index = torch.arange(heads, device=out.device)
    alone[index, index] = out  # row h holds head h's output alone; the last row is all zero
    projected = project(alone.reshape(heads + 1, heads * head_dim))  # (heads + 1, d)
    bias = projected[-1]
    return projected[:-1] - bias, bias


def source_writes(weights: Tensor, values: Tensor, head: int, heads: int, project) -> Tensor:
    """One head's write at one position split by the key it read: row j is
    weights[j] · v_j through the head's columns of the projection (bias removed).

    weights: (keys,), the head's attention row; values: (keys, head_dim), its values.
    Returns (keys, d); the rows sum to head_writes' row for the head (the head's output is
    Σ_j weights[j] · v_j, and the projection is linear)."""
    keys, head_dim = values.shape
    alone = torch.zeros(keys + 1, heads, head_dim, dtype=values.dtype, device=values.device)
    alone[:keys, head] = weights.unsqueeze(-1) * values
    projected = project(alone.reshape(keys + 1, heads * head_dim))
    return projected[:-1] - projected[-1]
