"""Runs attention_core on matrices a client sends (POST /api/core/attention)."""

from __future__ import annotations

import torch
from torch import Tensor

import attention_core as ac
from atlas_engine.errors import InvalidInput
from atlas_engine.schemas.core import CoreAttentionRequest, CoreAttentionResponse
from atlas_engine.serialize import to_bool_lists, to_lists, to_lists_with_nulls


def build_mask(req: CoreAttentionRequest, q_len: int, k_len: int) -> Tensor:
    """The (q_len, k_len) boolean mask the request names; True = may attend."""
    spec = ac.MaskSpec(
        kind=req.mask,
        window=req.window,
        dilation=req.dilation,
        global_tokens=tuple(req.global_tokens),
        num_random=req.num_random,
        seed=req.seed,
        block_size=req.block_size,
        custom=req.custom_mask,
    )
    return ac.build_mask(spec, q_len, k_len)


def run_core_attention(req: CoreAttentionRequest) -> CoreAttentionResponse:
    q = torch.tensor(req.q, dtype=torch.float64)  # (q_len, d_k)
    k = torch.tensor(req.k, dtype=torch.float64)  # (k_len, d_k)
    v = torch.tensor(req.v, dtype=torch.float64)  # (k_len, d_v)
    try:
        mask = build_mask(req, q.shape[0], k.shape[0])
        trace = ac.scaled_dot_product_attention(
            q, k, v, mask, scale=req.scale, temperature=req.temperature
        )
    except ValueError as err:
        raise InvalidInput(str(err)) from err
    if not torch.isfinite(trace.scaled_scores).all():
        raise InvalidInput(
            "the scores overflow float64; send smaller numbers or a larger temperature"
        )
    rendering = ac.render_mask(mask)
    return CoreAttentionResponse(
        scores=to_lists(trace.scores),
        scaled_scores=to_lists(trace.scaled_scores),
        masked_scores=to_lists_with_nulls(trace.masked_scores),
        weights=to_lists(trace.weights),
        output=to_lists(trace.output),
        mask=to_bool_lists(mask),
        scale=trace.scale,
        temperature=trace.temperature,
        computed_pairs=rendering.computed_pairs,
        full_pairs=rendering.full_pairs,
    )
