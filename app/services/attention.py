"""Attention maps and per-head detail for real models (POST /api/attention[/detail])."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import torch
from fastapi import Response

from app.errors import InvalidInput
from app.inference.cache import ForwardCache
from app.inference.forward import ForwardResult, run_forward
from app.models import families
from app.models.loader import LoadedModel
from app.models.manager import ModelManager
from app.schemas.attention import MAX_JSON_WEIGHTS, AttentionRequest, DetailRequest, DetailResponse
from app.serialize import BINARY_MEDIA_TYPE, encode_binary, float32_json, to_bool_lists, to_lists
from attention_core import causal_mask, replay_layer
from attention_core.sdpa import resolve_scale

ShouldStop = Callable[[], bool] | None


def forward_for(
    loaded: LoadedModel,
    cache: ForwardCache,
    text: str,
    text_pair: str | None,
    should_stop: ShouldStop = None,
) -> tuple[ForwardResult, bool]:
    """The forward pass over the text: from the cache, or one new forward pass."""
    return cache.get_or_compute(
        (loaded.id, text, text_pair), lambda: run_forward(loaded, text, text_pair, should_stop)
    )


def _indices(requested: Sequence[int] | None, count: int, what: str) -> list[int]:
    if requested is None:
        return list(range(count))
    if not requested:
        raise InvalidInput(f"{what} is an empty list; omit it to get all {count}")
    bad = [i for i in requested if not 0 <= i < count]
    if bad:
        raise InvalidInput(
            f"{what} {bad[:5]} out of range: this model has {count} (0 to {count - 1})"
        )
    return list(requested)


def check_layer_head(loaded: LoadedModel, layer: int, head: int) -> None:
    _indices([layer], loaded.arch.num_layers, "layer")
    _indices([head], loaded.arch.num_heads, "head")


def attention_maps(
    manager: ModelManager,
    cache: ForwardCache,
    req: AttentionRequest,
    should_stop: ShouldStop = None,
) -> Response:
    """The requested [layer][head][query][key] maps, as JSON or compact binary."""
    loaded = manager.get(req.model)
    layers = _indices(req.layers, loaded.arch.num_layers, "layers")
    heads = _indices(req.heads, loaded.arch.num_heads, "heads")
    result, cached = forward_for(loaded, cache, req.text, req.text_pair, should_stop)
    maps = result.attentions[layers][:, heads]  # (len(layers), len(heads), T, T)
    meta = {
        "model": loaded.id,
        "tokens": result.tokens,
        "raw_tokens": result.raw_tokens,
        "token_ids": result.token_ids,
        "special_tokens": result.special,
        "segments": result.segments,
        "num_layers": loaded.arch.num_layers,
        "num_heads": loaded.arch.num_heads,
        "num_kv_heads": loaded.arch.num_kv_heads,
        "causal": loaded.causal,
        "layers": layers,
        "heads": heads,
        "cached": cached,
        "forward_ms": round(result.forward_seconds * 1000, 3),
    }
    if req.format == "json":
        if maps.numel() > MAX_JSON_WEIGHTS:
            raise InvalidInput(
                f"as JSON this answer would hold {maps.numel():,} weights (about "
                f"{maps.numel() * 13 // 2**20} MB); the JSON limit is {MAX_JSON_WEIGHTS:,}. Ask for "
                "fewer layers or heads, or use format 'u8' or 'f16' (binary, 1-2 bytes a weight)."
            )
        head = json.dumps(meta, ensure_ascii=False)
        body = head[:-1] + ', "attentions": ' + float32_json(maps) + "}"
        return Response(body, media_type="application/json")
    return Response(encode_binary(meta, maps, req.format), media_type=BINARY_MEDIA_TYPE)


def attention_detail(
    manager: ModelManager, cache: ForwardCache, req: DetailRequest, should_stop: ShouldStop = None
) -> DetailResponse:
    """One head recomputed from the model's weights, with a scale/temperature counterfactual."""
    loaded = manager.get(req.model)
    check_layer_head(loaded, req.layer, req.head)
    result, _ = forward_for(loaded, cache, req.text, req.text_pair, should_stop)
    if req.query is not None and req.query >= result.seq_len:
        raise InvalidInput(f"query {req.query} out of range: the text has {result.seq_len} tokens")
    seq = result.seq_len
    proj = families.qk_projection(loaded.model, loaded.family, req.layer)
    rope = families.rope(loaded.model, loaded.family, seq)
    mask = causal_mask(seq) if loaded.causal else None
    hidden = result.hidden_inputs[req.layer].unsqueeze(0)  # (1, T, d_model)
    with torch.inference_mode():
        actual = replay_layer(hidden, proj, mask, rope=rope, heads=[req.head])
        scale = proj.scale if req.scale is True else resolve_scale(req.scale, proj.head_dim)
        what_if = replay_layer(
            hidden,
            proj,
            mask,
            rope=rope,
            heads=[req.head],
            scale=scale,
            temperature=req.temperature,
        )
    kv_head = req.head // (proj.n_heads // proj.n_kv_heads)
    q = actual.q[0, req.head]  # (T, hd)
    k = actual.k[0, kv_head]  # (T, hd)
    model_weights = result.attentions[req.layer, req.head]  # (T, T), transformers' own output
    diff = (actual.trace.weights[0, 0] - model_weights).abs().max().item()
    return DetailResponse(
        model=loaded.id,
        tokens=result.tokens,
        special_tokens=result.special,
        layer=req.layer,
        head=req.head,
        kv_head=kv_head,
        head_dim=proj.head_dim,
        model_scale=proj.scale,
        q=to_lists(q),
        k=to_lists(k),
        v=to_lists(actual.v[0, kv_head]),
        output=to_lists(actual.trace.output[0, 0]),
        scores=to_lists(actual.trace.scores[0, 0]),
        scaled_scores=to_lists(actual.trace.scaled_scores[0, 0]),
        mask=to_bool_lists(mask if mask is not None else torch.ones(seq, seq, dtype=torch.bool)),
        weights=to_lists(model_weights),
        replay_max_abs_diff=diff,
        counterfactual_scale=scale,
        counterfactual_temperature=req.temperature,
        counterfactual_weights=to_lists(what_if.trace.weights[0, 0]),
        query=req.query,
        products=None if req.query is None else to_lists(q[req.query] * k),
    )
