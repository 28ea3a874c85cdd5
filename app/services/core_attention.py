"""Runs attention_core on matrices a client sends (POST /api/core/attention)."""

from __future__ import annotations

import torch
from torch import Tensor

import attention_core as ac
from app.errors import InvalidInput
from app.schemas.core import CoreAttentionRequest, CoreAttentionResponse
from app.serialize import to_bool_lists, to_lists, to_lists_with_nulls


def build_mask(req: CoreAttentionRequest, q_len: int, k_len: int) -> Tensor:
    """The (q_len, k_len) boolean mask the request names; True = may attend."""
    n = q_len
    match req.mask:
        case "none":
            return torch.ones(q_len, k_len, dtype=torch.bool)
        case "causal":
            return ac.causal_mask(q_len, k_len)
        case "sliding_window":
            return ac.sliding_window_mask(n, window=req.window)
        case "dilated":
            return ac.dilated_window_mask(n, window=req.window, dilation=req.dilation)
        case "global":
            return ac.global_tokens_mask(q_len, k_len, indices=req.global_tokens)
        case "random":
            return ac.random_mask(
                q_len, k_len, num_random=min(req.num_random, k_len), seed=req.seed
            )
        case "bigbird":
            return ac.bigbird_mask(
                n,
                window=req.window,
                global_indices=req.global_tokens,
                num_random=min(req.num_random, n),
                seed=req.seed,
            )
        case "block_sparse":
            return ac.block_sparse_mask(n, block_size=req.block_size)
        case "custom":
            return ac.custom_mask(req.custom_mask)
    raise InvalidInput(f"unknown mask {req.mask!r}")  # unreachable: the schema lists the kinds


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
