"""The lab pages' numbers, all from attention_core."""

from __future__ import annotations

import math
from functools import lru_cache

import torch

import attention_core as ac
from atlas_engine.errors import InvalidInput
from atlas_engine.schemas.lab import (
    MasksRequest,
    MasksResponse,
    MaskView,
    ScalingRequest,
    ScalingResponse,
    SoftmaxSide,
)
from atlas_engine.serialize import to_bool_lists, to_lists

CURVE_D_K = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
CURVE_DRAWS = 128
VARIANCE_SAMPLES = 2048


def all_masks(req: MasksRequest) -> MasksResponse:
    n = req.n
    outside = [i for i in req.global_tokens if i >= n]
    if outside:
        raise InvalidInput(
            f"global_tokens {outside[:5]} out of range: with n = {n} tokens they must lie in "
            f"0 to {n - 1}"
        )
    global_ids = tuple(sorted(req.global_tokens))
    common = {
        "window": req.window,
        "dilation": req.dilation,
        "global_tokens": global_ids,
        "num_random": req.num_random,
        "seed": req.seed,
        "block_size": req.block_size,
    }
    shown = [  # (name on the page, kind of attention_core's MASK_KINDS, label, what it does)
        ("full", "none", "Full attention", "every token sees every token"),
        ("causal", "causal", "Causal", "a token sees itself and the past (decoders)"),
        (
            "sliding_window",
            "sliding_window",
            f"Sliding window (±{req.window})",
            "a token sees its neighbours on both sides (Longformer's local attention, "
            "BigBird's window; encoders)",
        ),
        (
            "sliding_window_causal",
            "sliding_window_causal",
            f"Causal sliding window ({req.window} back)",
            "a token sees itself and the previous few only (Mistral, Gemma 2's local "
            "layers; decoders)",
        ),
        (
            "dilated",
            "dilated",
            f"Dilated window (±{req.window}, every {req.dilation})",
            "a window with gaps: reaches further for the same cost",
        ),
        (
            "global",
            "global",
            f"Global tokens {list(global_ids)}",
            "a few tokens see and are seen by all",
        ),
        (
            "random",
            "random",
            f"Random ({min(req.num_random, n)} a row, seed {req.seed})",
            "each token sees a few random keys",
        ),
        ("bigbird", "bigbird", "BigBird", "window + global + random together"),
        (
            "block_sparse",
            "block_sparse",
            f"Block-sparse (blocks of {req.block_size})",
            "attention only inside fixed blocks",
        ),
    ]
    try:
        masks = [
            (name, label, text, ac.build_mask(ac.MaskSpec(kind=kind, **common), n))
            for name, kind, label, text in shown
        ]
    except ValueError as err:
        raise InvalidInput(str(err)) from err
    return MasksResponse(
        n=n,
        masks=[
            MaskView(
                kind=kind,
                label=label,
                explanation=text,
                mask=to_bool_lists(mask),
                computed_pairs=int(mask.sum()),
                full_pairs=n * n,
            )
            for kind, label, text, mask in masks
        ],
    )


def _side(logits: torch.Tensor) -> SoftmaxSide:
    stats = ac.softmax_stats(logits)
    return SoftmaxSide(
        logits=to_lists(logits),
        weights=to_lists(stats.weights),
        entropy=float(stats.entropy),
        max_weight=float(stats.max_weight),
        effective_tokens=float(stats.effective_tokens),
        jacobian_norm=float(stats.jacobian_norm),
    )


@lru_cache(maxsize=256)
def _variance(d_k: int, seed: int) -> tuple[float, float]:
    result = ac.score_variance([d_k], n_samples=VARIANCE_SAMPLES, seed=seed)
    return result.unscaled[0], result.scaled[0]


@lru_cache(maxsize=256)
def _entropy_curve(temperature: float, n_keys: int, seed: int) -> tuple[list[float], list[float]]:
    """Mean entropy over CURVE_DRAWS random (q, K) draws at each d_k: (scaled, unscaled)."""
    scaled, unscaled = [], []
    for d in CURVE_D_K:
        g = torch.Generator().manual_seed(seed + d)
        qs = torch.randn(CURVE_DRAWS, 1, d, generator=g)
        ks = torch.randn(CURVE_DRAWS, n_keys, d, generator=g)
        logits = (qs @ ks.transpose(-2, -1)).squeeze(1) / temperature  # (draws, n_keys)
        unscaled.append(float(ac.entropy(torch.softmax(logits, -1)).mean()))
        scaled.append(float(ac.entropy(torch.softmax(logits / math.sqrt(d), -1)).mean()))
    return scaled, unscaled


def scaling_demo(req: ScalingRequest) -> ScalingResponse:
    """Random q, k with unit-variance components: softmax of q·k scaled and unscaled."""
    g = torch.Generator().manual_seed(req.seed)
    q = torch.randn(req.d_k, generator=g, dtype=torch.float64)
    k = torch.randn(req.n_keys, req.d_k, generator=g, dtype=torch.float64)
    scores = k @ q  # (n_keys,)
    scaled = _side(scores / math.sqrt(req.d_k) / req.temperature)
    unscaled = _side(scores / req.temperature)
    variance_unscaled, variance_scaled = _variance(req.d_k, req.seed)
    curve_scaled, curve_unscaled = _entropy_curve(req.temperature, req.n_keys, req.seed)
    return ScalingResponse(
        d_k=req.d_k,
        temperature=req.temperature,
        n_keys=req.n_keys,
        scaled=scaled,
        unscaled=unscaled,
        variance_unscaled=variance_unscaled,
        variance_scaled=variance_scaled,
        curve_d_k=CURVE_D_K,
        curve_entropy_scaled=curve_scaled,
        curve_entropy_unscaled=curve_unscaled,
        max_entropy=math.log(req.n_keys),
    )
