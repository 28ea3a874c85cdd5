"""Attention maps and per-head detail for real models (POST /api/attention[/detail])."""

from __future__ import annotations

import math

import torch

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.inference.inflight import Reservation, Reservations
from atlas_engine.inference.replay import layer_capture, layer_weights, refused
from atlas_engine.models.capture import LayerCapture
from atlas_engine.models.loader import LoadedModel, predicts_of
from atlas_engine.schemas.attention import (
    DETAIL_MATRICES,
    AttentionRequest,
    DetailRequest,
    DetailResponse,
)
from atlas_engine.serialize import (
    MapsAnswer,
    held_while_sending,
    in_order,
    json_bytes_bound,
    json_with_float32,
)
from atlas_engine.services.checks import (
    check_answer_size,
    check_layer_bytes,
    check_layer_head,
    indices,
)
from atlas_engine.services.passes import Passes, ShouldStop
from attention_core import masked_softmax, value_weighted_norms
from attention_core.modern import head_output, head_scores, modern_logits, sink_softmax
from attention_core.tiles import pool_weights
from attention_core.trace import resolve_scale


def maps_meta(
    loaded: LoadedModel,
    result: ForwardResult,
    cached: bool,
    layers: list[int],
    heads: list[int],
    cell: int = 1,
    reduce: str = "max",
) -> dict:
    """The fields of a maps answer besides the maps themselves."""
    return {
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
        "predicts": predicts_of(loaded),
        "layers": layers,
        "heads": heads,
        "cell": cell,
        "reduce": reduce,
        "cached": cached,
        "forward_ms": round(result.forward_seconds * 1000, 3),
    }


def attention_maps(
    passes: Passes,
    req: AttentionRequest,
    max_answer_bytes: int,
    should_stop: ShouldStop = None,
) -> tuple[MapsAnswer, Reservations]:
    """The requested [layer][head][query][key] maps, framed for streaming.

    Everything is sized from the request before any work: the indices against the model, the
    answer's bytes against its limit, and the forward pass it reads against the in-flight
    budget. The caller streams answer.chunks() and must release the reservation afterwards.
    """
    loaded = passes.model(req.model)
    layers = indices(req.layers, loaded.arch.num_layers, "layers")
    heads = indices(req.heads, loaded.arch.num_heads, "heads")
    seq = count_tokens(loaded, req.text, req.text_pair)
    side = math.ceil(seq / req.cell)  # values along each side of an answered map
    check_answer_size(req.format, len(layers), len(heads), seq, max_answer_bytes, side)
    check_layer_bytes(len(heads), seq)  # a layer's whole maps are computed before pooling
    key = (loaded.id, req.text, req.text_pair)
    asked = set(layers)

    def keep(layer: int, maps: torch.Tensor) -> None:
        """A new pass's own maps go to the memo: the layers asked for first (they are read
        next), the others where the cache has room to spare (the explorer asks for them next)."""
        passes.cache.keep_layer(key, layer, maps, make_room=layer in asked)

    # Besides its forward pass, a streamed answer holds one layer's float32 maps at a time and
    # the pieces it is sending (for as long as its reader takes them).
    weights = len(layers) * len(heads) * side * side
    held = passes.reserve(
        loaded,
        req.text,
        req.text_pair,
        should_stop,
        whole_maps=False,
        keep_maps=keep,
        answer_bytes=4 * len(heads) * seq * seq + held_while_sending(req.format, weights, seq),
    )
    result, cache = held.result, passes.cache
    chosen = None if heads == list(range(loaded.arch.num_heads)) else heads

    def layer_maps(i: int) -> torch.Tensor:
        """(h, side, side): the layer's maps (whole_layer_maps), each cell x cell block reduced
        to one value where the request pools them."""
        return pool_weights(whole_layer_maps(i), req.cell, req.reduce)

    def whole_layer_maps(i: int) -> torch.Tensor:
        """(h, T, T): a view of kept maps, the memo (the pass's own maps, or a replay), or a
        new replay (of every head, memoised, or of the heads asked for only)."""
        if result.stored_maps is not None:
            return result.layer_maps(layers[i], chosen)
        maps = cache.replayed_layer(key, layers[i])
        if maps is None:
            maps = result.layer_maps(layers[i], chosen)
            if chosen is None:
                cache.keep_layer(key, layers[i], maps)
            return maps
        return maps if chosen is None else maps[chosen]

    meta = maps_meta(loaded, result, held.cached, layers, heads, req.cell, req.reduce)
    all_held = result.stored_maps is not None or all(
        cache.replayed_layer(key, layer) is not None for layer in layers
    )
    shape = (len(layers), len(heads), side, side)
    answer = MapsAnswer(meta, req.format, shape, layer_maps, all_held)
    return answer, held.reservation


def counterfactual_weights(
    scores: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    temperature: float,
    captured: LayerCapture | None = None,
    head: int = 0,
) -> torch.Tensor:
    """softmax(scores * scale / temperature) over allowed keys, (T, T) -> (T, T) float32, with
    the head's own softcap, position bias and sink where `captured` (its layer) has them.

    Computed in float64, where scores times any factor the schema admits stay finite (a
    temperature of 1e-40 gives one-hot rows, not NaN); a factor past float64's range is refused.
    """
    factor = scale / temperature
    logits = scores.to(torch.float64) * factor
    if not (math.isfinite(factor) and torch.isfinite(logits).all()):
        raise InvalidInput(
            f"scale / temperature = {scale:g} / {temperature:g} overflows: the scores would be "
            "infinite. Use a larger temperature or a smaller scale."
        )
    if captured is None or captured.plain:
        return masked_softmax(logits, mask).to(torch.float32)
    bias = None if captured.bias is None else captured.bias[head].to("cpu", torch.float64)
    sink = None if captured.sinks is None else captured.sinks[head].to("cpu", torch.float64)
    logits = modern_logits(logits, softcap=captured.softcap, bias=bias)
    return sink_softmax(logits, mask, sink).to(torch.float32)


def attention_detail(
    passes: Passes,
    req: DetailRequest,
    should_stop: ShouldStop = None,
) -> tuple[bytes, Reservation]:
    """One head recomputed from the model's weights, with a scale/temperature counterfactual:
    DetailResponse as JSON, its matrices' numbers as float32 (json_with_float32), written here
    on the compute lane, and its bytes' reservation (Passes.answer), which the caller releases
    once they are sent."""
    loaded = passes.model(req.model)
    check_layer_head(loaded, req.layer, req.head)
    seq = count_tokens(loaded, req.text, req.text_pair, loaded.full_map_tokens)
    numbers = 6 * seq * seq + 5 * seq * loaded.arch.head_dim  # (T, T) and (T, head_dim) ones
    with (
        passes.answer(json_bytes_bound(numbers, seq)) as reservation,
        passes.held(loaded, req, should_stop) as result,
    ):
        return json_with_float32(detail_of(loaded, result, req)), reservation


def detail_of(loaded: LoadedModel, result: ForwardResult, req: DetailRequest) -> dict:
    """One head of a forward pass replayed from the pass's own call of its layer (also the
    notebook widget's replay, which passes a LoadedModel and a ForwardResult made of its run):
    DetailResponse's fields in its order, each matrix a tensor on the host (the mask bool, the
    others float32) or None where the request's `fields` leave it out."""
    if req.query is not None and req.query >= result.seq_len:
        raise InvalidInput(f"query {req.query} out of range: the text has {result.seq_len} tokens")
    if not loaded.replayable:
        raise refused(loaded.id, loaded.replay_refusal)
    seq = result.seq_len
    captured = layer_capture(result.calls, result.hidden_inputs, req.layer)
    head, kv_head = req.head, req.head // captured.group
    with torch.inference_mode():
        q = captured.q[head].to("cpu", torch.float32)  # (T, hd)
        k = captured.k[kv_head].to("cpu", torch.float32)  # (T, hd)
        v = captured.v[kv_head].to("cpu", torch.float32)  # (T, hd_v)
        allowed = captured.allowed()  # (T, T) bool or None: the layer's own mask
        replayed = layer_weights(captured, [head], allowed)[0].to("cpu", torch.float32)
        scores = head_scores(captured.q[head], captured.k[kv_head]).to("cpu", torch.float32)
    scale = resolve_scale(req.scale, captured.head_dim, default=captured.scale)
    what_if = counterfactual_weights(scores, allowed, scale, req.temperature, captured, head)
    model_weights = result.head_map(req.layer, head)  # (T, T), what the maps show
    diff = (replayed - model_weights).abs().max().item()
    wanted = set(req.fields or DETAIL_MATRICES)
    full_mask = allowed if allowed is not None else torch.ones(seq, seq, dtype=torch.bool)
    matrices = {
        "q": lambda: q,
        "k": lambda: k,
        "v": lambda: v,
        "output": lambda: head_output(model_weights, v),
        "scores": lambda: scores,
        "scaled_scores": lambda: scores * captured.scale,
        "mask": lambda: full_mask,
        "weights": lambda: model_weights,
        "counterfactual_weights": lambda: what_if,
        "products": lambda: None if req.query is None else q[req.query] * k,
        "value_weighted": lambda: value_weighted_norms(model_weights, v),
    }
    sink = None if captured.sinks is None else float(captured.sinks[head])
    fields = {
        "model": loaded.id,
        "tokens": result.tokens,
        "special_tokens": result.special,
        "layer": req.layer,
        "head": head,
        "kv_head": kv_head,
        "head_dim": captured.head_dim,
        "model_scale": captured.scale,
        "softcap": captured.softcap,
        "sink": sink,
        "position_bias": captured.bias is not None,
        "replay_max_abs_diff": diff,
        "counterfactual_scale": scale,
        "counterfactual_temperature": req.temperature,
        "query": req.query,
        **{name: make() if name in wanted else None for name, make in matrices.items()},
    }
    return in_order(fields, DetailResponse)
