"""Attention summed up across heads and layers: head averages, attention rollout, and how
alike heads are.

Maps are (layers, heads, seq, seq) with rows summing to 1, as elsewhere in attention_core.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor


def head_average(attentions: Tensor) -> Tensor:
    """The mean map of each layer's heads. (layers, heads, seq, seq) -> (layers, seq, seq)."""
    return attentions.mean(dim=1)


def attention_rollout(attentions: Tensor, *, residual: float = 0.5) -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each input token feeds each token
    after every layer, following attention through the residual stream.

    Each layer's heads are averaged, mixed with the identity for the residual path
    (A' = residual * I + (1 - residual) * A, rows still summing to 1) and multiplied through the
    layers: R_l = A'_l R_{l-1}, R_0 = A'_0. Returns (layers, seq, seq): row i of R_l is what
    token i holds of every input token after layer l. Works for causal maps as well (they stay
    lower triangular). residual = 0.5 is the paper's choice.
    """
    return torch.stack(list(rollout_steps(attentions, residual=residual))).to(attentions.dtype)


def rollout_steps(
    attentions: Tensor | Iterable[Tensor], *, residual: float = 0.5
) -> Iterator[Tensor]:
    """attention_rollout one layer at a time, holding one (seq, seq) product: yields R_0, R_1,
    ... as float64 (seq, seq) tensors. attentions: (layers, heads, seq, seq), or its layers
    (heads, seq, seq) one at a time from any iterable (maps computed on demand)."""
    if not 0 <= residual <= 1:
        raise ValueError(f"residual must lie in [0, 1]; got {residual}")
    current = eye = None
    for layer_maps in attentions:
        if layer_maps.dim() != 3 or layer_maps.shape[-1] != layer_maps.shape[-2]:
            raise ValueError(
                "attentions must be (layers, heads, seq, seq); got a layer of "
                f"{tuple(layer_maps.shape)}"
            )
        if eye is None:
            eye = torch.eye(layer_maps.shape[-1], dtype=torch.float64, device=layer_maps.device)
            current = eye
        mixed = residual * eye + (1 - residual) * layer_maps.to(torch.float64).mean(dim=0)
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        current = mixed @ current  # (seq, seq)
        yield current


def js_divergence(p: Tensor, q: Tensor) -> Tensor:
    """Jensen-Shannon divergence of distributions along the last dim, in bits (0 to 1).
    (..., n), (..., n) -> (...)."""
    m = (p + q) / 2

    def kl(a: Tensor, b: Tensor) -> Tensor:
        ratio = torch.where(
            a > 0, a / torch.where(b > 0, b, torch.ones((), dtype=b.dtype, device=b.device)), 1
        )
        return (a * torch.log2(ratio)).sum(dim=-1)

    return ((kl(p, m) + kl(q, m)) / 2).clamp_min(0)


def pooled_patterns(attentions: Tensor, max_rows: int = 64, max_bins: int = 64) -> Tensor:
    """Each head's pattern reduced for comparison: at most `max_rows` query rows, evenly
    spaced, each with its keys summed into at most `max_bins` contiguous bins (still a
    distribution). Exact (nothing reduced) up to 64 tokens.
    (layers, heads, seq, seq) -> (layers * heads, rows, bins)."""
    layers, heads, seq, _ = attentions.shape
    device = attentions.device
    rows = torch.linspace(0, seq - 1, min(seq, max_rows), device=device).round().long().unique()
    flat = attentions.reshape(layers * heads, seq, seq)[:, rows].to(torch.float64)
    bins = min(seq, max_bins)
    edges = torch.linspace(0, seq, bins + 1, device=device).round().long()
    cumulative = torch.nn.functional.pad(flat.cumsum(dim=-1), (1, 0))  # (n, rows, seq + 1)
    return cumulative[..., edges[1:]] - cumulative[..., edges[:-1]]  # (n, rows, bins)


def head_similarity(attentions: Tensor, max_rows: int = 64, max_bins: int = 64) -> Tensor:
    """How alike every two heads are on this text: 1 - the Jensen-Shannon divergence of their
    rows, averaged over query rows (on pooled_patterns: exact up to 64 tokens). (layers, heads,
    seq, seq) -> (L*H, L*H), head index layer * heads + head; 1 on the diagonal, symmetric.

    Uses JS(p, q) = H((p + q) / 2) - (H(p) + H(q)) / 2 in bits: each head's own entropies once,
    one entropy of the mixture per pair."""
    patterns = pooled_patterns(attentions, max_rows, max_bins).to(torch.float32)
    n = patterns.shape[0]
    own = torch.special.entr(patterns).sum(dim=-1)  # (n, rows), nats
    out = torch.ones(n, n, dtype=torch.float32, device=patterns.device)
    for a in range(n - 1):  # one row of the matrix at a time
        mixture = torch.special.entr((patterns[a] + patterns[a + 1 :]) / 2).sum(dim=-1)
        divergence = (mixture - (own[a] + own[a + 1 :]) / 2) / math.log(2)  # bits
        similar = 1 - divergence.clamp(0, 1).mean(dim=-1)
        out[a, a + 1 :] = similar
        out[a + 1 :, a] = similar
    return out


def cluster_order(similarity: Tensor) -> list[int]:
    """An order of the heads that puts alike heads next to each other (greedy nearest
    neighbour from the most typical head), for drawing the similarity matrix. (n, n) -> [n]."""
    n = similarity.shape[0]
    if n == 0:
        return []
    remaining = set(range(n))
    current = int(similarity.sum(dim=1).argmax())
    order = [current]
    remaining.discard(current)
    while remaining:
        candidates = sorted(remaining)
        current = candidates[int(similarity[current, candidates].argmax())]
        order.append(current)
        remaining.discard(current)
    return order


@dataclass(frozen=True)
class TokenFollow:
    """One token followed through every layer and head.

    as_query[l, h] is what the token attends to (its row); as_key[l, h] is what every token
    gives it (its column); both (layers, heads, seq). The *_mean and *_max fields summarise the
    heads of each layer, (layers, seq)."""

    as_query: Tensor
    as_key: Tensor
    query_mean: Tensor
    query_max: Tensor
    key_mean: Tensor
    key_max: Tensor


def follow_token(attentions: Tensor, token: int) -> TokenFollow:
    """What `token` attends to and who attends to it, in every layer and head at once.
    attentions: (layers, heads, seq, seq) -> TokenFollow."""
    if attentions.dim() != 4:
        raise ValueError(
            f"attentions must be (layers, heads, seq, seq); got {tuple(attentions.shape)}"
        )
    seq = attentions.shape[-1]
    if not 0 <= token < seq:
        raise ValueError(f"token {token} out of range: the text has {seq} tokens")
    row = attentions[:, :, token, :]  # (L, H, seq)
    column = attentions[:, :, :, token]  # (L, H, seq)
    return TokenFollow(
        as_query=row,
        as_key=column,
        query_mean=row.mean(dim=1),
        query_max=row.amax(dim=1),
        key_mean=column.mean(dim=1),
        key_max=column.amax(dim=1),
    )
