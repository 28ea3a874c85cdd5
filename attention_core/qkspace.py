"""Query-key space: one head's queries and keys drawn together in two dimensions.

As in AttentionViz (Yeh et al., 2023), queries and keys are first moved in the two ways that
leave every attention weight unchanged, so that a query lands near the keys it attends to:

- queries are scaled by s and keys by 1/s (q·k is unchanged);
- the keys are translated so their centroid is the queries' centroid. q·(k + c) = q·k + q·c,
  and q·c is the same for every key of one query, which softmax ignores;

with s chosen so that both sets end up with the same mean length.

Then both sets are projected together, by PCA (exact, from the SVD) or UMAP where the
`umap-learn` package is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor


@dataclass(frozen=True)
class NormalisedQK:
    queries: Tensor  # (q_len, head_dim)
    keys: Tensor  # (k_len, head_dim)
    key_shift: Tensor  # (head_dim,): what was added to every key after dividing it by the scale
    query_scale: float  # queries were multiplied by this, keys divided by it


@dataclass(frozen=True)
class Projection:
    queries: Tensor  # (q_len, 2)
    keys: Tensor  # (k_len, 2)
    explained: tuple[float, float] | None  # PCA: each axis's share of the variance; UMAP: None
    query_scale: float  # from normalise_qk


def normalise_qk(q: Tensor, k: Tensor) -> NormalisedQK:
    """q: (q_len, d), k: (k_len, d) -> the same vectors moved so that the keys' centroid is the
    queries' and both sets have the same mean norm; softmax(q kᵀ) row by row is unchanged.

    With queries scaled by s and keys by 1/s, the keys are then put on the queries' centroid:
    keys(s) = (k - k̄)/s + s·q̄. The s that balances the mean norms is the root of
    f(s) = mean‖keys(s)‖ - s·mean‖q‖, found by bisection on log s (f > 0 for small s, and
    f < 0 for large s unless every query points the same way; then s = 1 is kept).
    """
    q_mean, k_spread = q.mean(dim=0), k - k.mean(dim=0)  # (d,), (k_len, d)
    q_norm = q.norm(dim=-1).mean()

    def gap(s: float) -> float:
        return float((k_spread / s + s * q_mean).norm(dim=-1).mean() - s * q_norm)

    scale = 1.0
    low, high = -30.0, 30.0  # log s
    if q_norm > 0 and gap(2.0**low) > 0 > gap(2.0**high):
        for _ in range(80):
            mid = (low + high) / 2
            low, high = (mid, high) if gap(2.0**mid) > 0 else (low, mid)
        scale = 2.0 ** ((low + high) / 2)
    keys = k_spread / scale + scale * q_mean
    return NormalisedQK(
        queries=q * scale,
        keys=keys,
        key_shift=keys.mean(dim=0) - k.mean(dim=0) / scale,
        query_scale=scale,
    )


def pca_2d(points: Tensor) -> tuple[Tensor, tuple[float, float]]:
    """points: (n, d) -> ((n, 2) coordinates on the two principal axes, each axis's share of the
    variance). Each axis's sign is fixed so its largest loading is positive (stable pictures)."""
    centred = points - points.mean(dim=0)
    _, s, vh = torch.linalg.svd(centred.to(torch.float64), full_matrices=False)  # vh: (r, d)
    axes = vh[:2]  # (≤2, d)
    signs = torch.sign(axes.gather(1, axes.abs().argmax(dim=1, keepdim=True)))  # (≤2, 1)
    axes = axes * torch.where(signs == 0, torch.ones_like(signs), signs)
    coords = centred.to(torch.float64) @ axes.T  # (n, ≤2)
    if coords.shape[1] < 2:  # one point, or d == 1: pad the missing axis with zeros
        coords = torch.cat([coords, coords.new_zeros(coords.shape[0], 2 - coords.shape[1])], 1)
    variance = s.pow(2)
    total = float(variance.sum())
    shares = [float(v) / total if total > 0 else 0.0 for v in variance[:2].tolist()]
    shares += [0.0] * (2 - len(shares))
    return coords.to(points.dtype), (shares[0], shares[1])


@cache
def umap_available() -> bool:
    """Whether umap-learn can be imported (asked once: GET /api/models reads it every call)."""
    try:
        import umap  # noqa: F401
    except ImportError:
        return False
    return True


def umap_2d(points: Tensor, seed: int = 0) -> Tensor:
    """points: (n, d) -> (n, 2) by UMAP (cosine-free: Euclidean, as the dot-product geometry
    after normalisation is what matters), seeded so the same input draws the same picture."""
    import umap  # optional: `pip install 'attention-atlas[umap]'`

    n = points.shape[0]
    reducer = umap.UMAP(n_components=2, n_neighbors=max(2, min(15, n - 1)), random_state=seed)
    coords = reducer.fit_transform(points.detach().to("cpu", torch.float64).numpy())
    return torch.as_tensor(coords, dtype=points.dtype, device=points.device)


def qk_space(q: Tensor, k: Tensor, method: str = "pca") -> Projection:
    """q: (q_len, d), k: (k_len, d) -> both normalised (normalise_qk) and projected together
    into 2-D by `method` ("pca" or "umap")."""
    moved = normalise_qk(q, k)
    joint = torch.cat([moved.queries, moved.keys])  # (q_len + k_len, d)
    if method == "pca":
        coords, explained = pca_2d(joint)
    elif method == "umap":
        if joint.shape[0] < 4:
            raise ValueError(f"UMAP needs at least 4 points, got {joint.shape[0]}; use PCA")
        coords, explained = umap_2d(joint), None
    else:
        raise ValueError(f"method must be 'pca' or 'umap', got {method!r}")
    n = q.shape[0]
    return Projection(
        queries=coords[:n], keys=coords[n:], explained=explained, query_scale=moved.query_scale
    )
