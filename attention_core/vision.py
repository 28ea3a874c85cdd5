"""Attention over image patches: where each patch sits, how far heads look, rollout, artifacts.

A vision transformer's sequence is `prefix` tokens (a class token, register tokens, DeiT's
distillation token, or none for SigLIP) followed by the patches in row-major order: token
`prefix + r * cols + c` is the patch in grid row r, column c. Maps come one image at a time,
every layer stacked:

    weights     (layers, heads, T, T)   T = prefix + rows * cols; rows sum to 1 over the keys
    hidden      (T, d)                   one layer's output tokens

Distances are in pixels of the model's input (after resizing and cropping), measured between
patch centres; a patch is `patch` x `patch` pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

HEAD_FUSIONS = ("mean", "max", "min")
ARTIFACT_FACTOR = 3.0


def patch_centres(
    rows: int, cols: int, patch: int, device: torch.device | str | None = None
) -> Tensor:
    """Each patch's centre in pixels as (y, x), row-major: (rows * cols, 2), float32.

    Patch (r, c) covers pixels [r * patch, (r + 1) * patch) down and [c * patch, (c + 1) *
    patch) across, so its centre is ((r + 0.5) * patch, (c + 0.5) * patch).
    """
    if rows < 1 or cols < 1 or patch < 1:
        raise ValueError(f"rows, cols and patch must be at least 1, got {rows}, {cols}, {patch}")
    y = (torch.arange(rows, dtype=torch.float32, device=device) + 0.5) * patch  # (rows,)
    x = (torch.arange(cols, dtype=torch.float32, device=device) + 0.5) * patch  # (cols,)
    grid_y, grid_x = torch.meshgrid(y, x, indexing="ij")  # (rows, cols) each
    return torch.stack([grid_y.reshape(-1), grid_x.reshape(-1)], dim=-1)  # (rows * cols, 2)


def mean_attention_distance(
    weights: Tensor, prefix: int, rows: int, cols: int, patch: int
) -> Tensor:
    """The ViT paper's mean attention distance (Dosovitskiy et al. 2021, fig. 7), in pixels:
    (layers, heads, T, T) -> (layers, heads).

    For each query patch q, d_q = sum over key patches k of a_qk * |c_q - c_k| (Euclidean
    distance between patch centres), then the mean of d_q over the query patches.

    Convention for the prefix tokens (class token, registers, distillation token): they are
    left out as queries and as keys, and each query's weights on the patch keys are
    renormalised to sum to 1 before weighting the distances. The number is then a distance
    (a weighted mean of distances, at most the grid's diagonal) whatever share of attention
    the head parks on the prefix. Without the renormalisation it would be that distance times
    the query's share on patches: a head that gives 90% of its attention to the class token
    would read ten times closer than the patches it looks at. A query row with no weight at
    all on the patches (possible only by underflow) has no distance: it is left out of the
    mean, and a head whose every row is such reads 0.
    """
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be (layers, heads, T, T), got {tuple(weights.shape)}")
    tokens = weights.shape[-1]
    if tokens != prefix + rows * cols:
        raise ValueError(
            f"weights cover {tokens} tokens, but prefix {prefix} + {rows} x {cols} patches "
            f"is {prefix + rows * cols}"
        )
    centres = patch_centres(rows, cols, patch, weights.device)  # (N, 2)
    distance = torch.cdist(centres, centres)  # (N, N) pixels between patch centres
    on_patches = weights[..., prefix:, prefix:].float()  # (L, H, N, N) patch queries, patch keys
    share = on_patches.sum(-1)  # (L, H, N) each query's weight on patches
    weighted = (on_patches * distance).sum(-1)  # (L, H, N) unrenormalised distance
    has_patches = share > 0
    per_query = torch.where(has_patches, weighted / share.clamp_min(1e-30), 0.0)  # (L, H, N)
    counted = has_patches.sum(-1).clamp_min(1)  # (L, H)
    return per_query.sum(-1) / counted  # (L, H)


def rollout(weights: Tensor, residual: float = 0.5, head_fusion: str = "mean") -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): (layers, heads, T, T) -> (T, T).

    Per layer l, the heads are fused (their mean, or elementwise max or min) into A_l (T, T),
    the residual connection is stood for by the identity, A^_l = residual * I + (1 - residual)
    * A_l, and each row of A^_l is renormalised to sum to 1 (max and min fusion leave rows that
    do not). The rollout is the product R = A^_L ... A^_2 A^_1 (the last layer on the left):
    R[q, k] is the share of token k's input embedding in the last layer's output at q, if each
    layer mixed tokens only by its fused attention. The class token's row R[0, prefix:],
    reshaped to (rows, cols), is the usual picture.

    What it claims and what it does not: it tracks how attention weights compound through the
    layers, treating every token's contribution as the weight put on it. It ignores the
    values (a heavily attended token with a small value vector contributes little), the MLPs,
    the layer norms and the true size of the residual stream against each attention output
    (`residual` is a fixed guess, 0.5 in the paper), and fusing heads discards what each one
    does. It is a picture of information flow under those assumptions, not an attribution.
    """
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be (layers, heads, T, T), got {tuple(weights.shape)}")
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must be in [0, 1], got {residual}")
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion must be one of {HEAD_FUSIONS}, got {head_fusion!r}")
    weights = weights.float()
    if head_fusion == "mean":
        fused = weights.mean(dim=1)  # (L, T, T)
    elif head_fusion == "max":
        fused = weights.amax(dim=1)  # (L, T, T)
    else:
        fused = weights.amin(dim=1)  # (L, T, T)
    tokens = weights.shape[-1]
    identity = torch.eye(tokens, dtype=fused.dtype, device=fused.device)  # (T, T)
    mixed = residual * identity + (1.0 - residual) * fused  # (L, T, T)
    mixed = mixed / mixed.sum(-1, keepdim=True)  # (L, T, T) rows sum to 1
    result = identity
    for layer in mixed:  # first layer first: R_l = A^_l R_(l-1)
        result = layer @ result  # (T, T)
    return result


def attention_received(weights: Tensor) -> Tensor:
    """The attention each token receives: one layer's (heads, T, T) -> (T,), or stacked layers'
    (L, heads, T, T) -> (L, T); the mean over heads and over query rows of the weights on it
    (a layer's values sum to 1)."""
    if weights.dim() not in (3, 4) or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"weights must be (heads, T, T) or (L, heads, T, T), got {tuple(weights.shape)}"
        )
    return weights.float().mean(dim=(-3, -2))  # (T,) or (L, T)


@dataclass(frozen=True)
class Artifacts:
    """High-norm patch tokens (Darcet et al. 2023). `indices` are token positions (prefix
    included, so `indices - prefix` is the patch in row-major order), highest norm first;
    `norms` and `received` are theirs; `threshold` is the norm they exceed and `median` the
    patch tokens' median norm it was set from."""

    indices: Tensor  # (n,) int64
    norms: Tensor  # (n,)
    received: Tensor  # (n,)
    threshold: float
    median: float


def artifact_tokens(
    hidden: Tensor, received: Tensor, prefix: int, *, factor: float = ARTIFACT_FACTOR
) -> Artifacts:
    """The patch tokens whose output norm is an outlier: hidden (T, d), received (T,) ->
    Artifacts.

    Darcet et al. ("Vision Transformers Need Registers", 2023) found, in large and long-trained
    ViTs, a few patch tokens (about 2%, in low-information background) whose output norm is
    several times that of the others; they take much of the class token's attention and hold
    global rather than local information. They separated them with a fixed threshold (a norm
    of 150 on DINOv2 ViT-g), which depends on the model's scale and does not transfer. The rule
    here is relative and robust: a patch token is an artifact when its norm is more than
    `factor` times the median norm of the patch tokens (the median is not moved by the few
    outliers). Prefix tokens are never candidates. `hidden` should be the residual stream
    before the final layer norm (which rescales every token and hides the outliers);
    `received` is what each token receives (attention_received of the last layer).
    """
    if hidden.dim() != 2 or received.dim() != 1 or hidden.shape[0] != received.shape[0]:
        raise ValueError(
            f"hidden must be (T, d) and received (T,), got {tuple(hidden.shape)} and "
            f"{tuple(received.shape)}"
        )
    if not 0 <= prefix < hidden.shape[0]:
        raise ValueError(
            f"prefix must leave at least one patch token, got {prefix} of {hidden.shape[0]}"
        )
    if factor <= 1.0:
        raise ValueError(f"factor must be above 1, got {factor}")
    norms = hidden.float().norm(dim=-1)[prefix:]  # (N,) patch tokens' norms
    median = float(norms.median())
    threshold = factor * median
    found = torch.nonzero(norms > threshold).flatten()  # (n,) patch indices
    found = found[norms[found].argsort(descending=True)]
    indices = found + prefix  # (n,) token positions
    return Artifacts(
        indices=indices,
        norms=norms[found],
        received=received.float()[indices],
        threshold=threshold,
        median=median,
    )


PATCH_ROLES = ("self", "neighbours", "prefix", "entropy")
"""The per-head statistics of patch_roles, in the order its answer stacks them."""


def patch_roles(weights: Tensor, prefix: int, rows: int, cols: int) -> Tensor:
    """What each head does with its patch queries, as text heads' roles are read: (4, L, H).

    For every patch query, averaged over the rows * cols of them (the prefix tokens' own rows
    are left out; keys are every token):
      self        the weight on its own patch (text's "self" role);
      neighbours  the weight on the up to 8 patches around it (the image's "previous token": a
                  local head; a patch on the border has fewer);
      prefix      the weight on the prefix tokens (class, registers): the image's sink;
      entropy     -sum(w log w) over its row, divided by log(T): 0 on one key, 1 uniform.
    weights: (L, H, T, T) with T = prefix + rows * cols."""
    tokens = weights.shape[-1]
    n = rows * cols
    if tokens != prefix + n:
        raise ValueError(f"maps of {tokens} tokens are not {prefix} + {rows} x {cols}")
    w = weights[:, :, prefix:, :].to(torch.float64)  # (L, H, n, T): the patch queries' rows
    patches = w[..., prefix:]  # (L, H, n, n)
    own = torch.diagonal(patches, dim1=-2, dim2=-1)  # (L, H, n)
    r = torch.arange(n, device=weights.device) // cols
    c = torch.arange(n, device=weights.device) % cols
    near = ((r[:, None] - r[None, :]).abs() <= 1) & ((c[:, None] - c[None, :]).abs() <= 1)
    near &= ~torch.eye(n, dtype=torch.bool, device=weights.device)  # (n, n): the 8 around
    neighbours = (patches * near).sum(dim=-1)  # (L, H, n)
    on_prefix = w[..., :prefix].sum(dim=-1)  # (L, H, n)
    entropy = -(w * torch.log(w.clamp_min(1e-30))).sum(dim=-1) / math.log(tokens)  # (L, H, n)
    stacked = torch.stack([own, neighbours, on_prefix, entropy])  # (4, L, H, n)
    return stacked.mean(dim=-1).to(torch.float32)  # (4, L, H)
