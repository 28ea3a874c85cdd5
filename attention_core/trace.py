"""One trace type and one scale rule for every attention variant.

Every variant (attention_core.variants) is called as

    variant(q, k, v, mask=None, *, causal=False, scale=True, temperature=1.0, **its_own)

and returns a Trace: the output, the dense weights it implies, the stages it has (raw, scaled
and masked scores where it forms them) and what it cost. Stages a variant never forms are None,
and its own intermediate tensors (the online softmax's log-sum-exp, linear attention's feature
maps ...) are in `stages` by name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from torch import Tensor

from attention_core.masks import causal_mask

Scale = bool | float | int | None
"""True or None: the default scale (1/sqrt(d_k), or a model's own). False: 1 (unscaled).
A positive number: that number."""


def resolve_scale(scale: Scale, d_k: int, default: float | None = None) -> float:
    """The number q @ k^T is multiplied by, from the user-facing `scale` option: the one place
    `scale` is read. `default` is the scale True means (a model's own; 1/sqrt(d_k) if None)."""
    if scale is None or scale is True:
        return default if default is not None else 1.0 / math.sqrt(d_k)
    if scale is False:
        return 1.0
    value = float(scale)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"scale must be a positive finite number, True or False; got {scale!r}")
    return value


def check_temperature(temperature: float) -> float:
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number; got {temperature!r}")
    return float(temperature)


@dataclass(frozen=True)
class Cost:
    """What one call computed, per batch and head."""

    pairs_computed: int  # (query, key) scores actually computed
    pairs_full: int  # q_len * k_len: what dense attention computes
    max_block_elements: int  # the largest score matrix held at once
    blocks_computed: int = 1  # score blocks computed (tiled: one per visited tile)
    blocks_skipped: int = 0  # blocks skipped because the mask forbids all of them


@dataclass(frozen=True)
class Trace:
    """Every stage of one attention call; patterns are (..., q_len, k_len).

    weights: the dense weights the variant implies (None where it never forms them: tiled
    attention holds one tile at a time). scores: before scaling; scaled_scores: the logits
    softmax sees (scores * scale / temperature); masked_scores: those with -inf where the mask
    forbids. scale is None for variants without one (additive, linear)."""

    variant: str
    output: Tensor  # (..., q_len, d_v)
    weights: Tensor | None
    scores: Tensor | None
    scaled_scores: Tensor | None
    masked_scores: Tensor | None
    scale: float | None
    temperature: float
    cost: Cost
    stages: Mapping[str, Tensor] = field(default_factory=dict)

    def to(self, device: object) -> Trace:
        """The same trace with every tensor on `device` (a replay run on a GPU, read on the host)."""
        moved = {
            name: getattr(self, name).to(device)
            for name in ("output", "weights", "scores", "scaled_scores", "masked_scores")
            if getattr(self, name) is not None
        }
        stages = {name: t.to(device) for name, t in self.stages.items()}
        return replace(self, **moved, stages=stages)


def combined_mask(
    mask: Tensor | None, causal: bool, q_len: int, k_len: int, device: object
) -> Tensor | None:
    """The mask and the causal rule (key j <= query i) as one boolean mask, or None."""
    if not causal:
        return mask
    future_ok = causal_mask(q_len, k_len, device=device)
    return future_ok if mask is None else mask & future_ok
