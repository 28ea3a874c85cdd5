"""Replaying one layer of a forward pass: its attention module called again on the hidden
states the pass captured, with the rest of its call as the pass made it (atlas_engine.models.capture),
stopped inside the attention function, which hands over q, k, v, the mask and the family's
extras. attention_core.modern computes the weights from them as the model's eager function does.

No code here knows an architecture: every model whose attention goes through transformers'
attention interface is replayed the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.errors import InvalidInput
from atlas_engine.models.capture import LayerCall, LayerCapture, MaskRecipe, Refused, capture_layer
from attention_core.head_stats import VisibleKeys
from attention_core.modern import head_weights
from attention_core.tiles import PLAIN, Extras, MaskBlock


def refused(model_id: str, reason: str) -> InvalidInput:
    """The 422 of a view that recomputes a head, on a model whose heads are not replayed."""
    return InvalidInput(
        f"'{model_id}': Atlas shows its attention maps, but cannot replay a head (the "
        "explorer's Query · Key, Step by step, Mask, Without √d, Value-weighted and Q-K space "
        f"views, ablation, Deep zoom and the lab pages that use a model's heads): {reason}"
    )


def layer_capture(calls: list[LayerCall] | None, hidden_inputs: Tensor, layer: int) -> LayerCapture:
    """hidden_inputs: (layers, seq, d_model) from a forward pass, calls its LayerCalls
    (ForwardResult.calls): what layer `layer`'s attention function received."""
    if not calls:
        raise InvalidInput("this forward pass kept no layer calls to replay")
    call = calls[layer]
    device, dtype = _where(call)
    try:
        return capture_layer(call, hidden_inputs[layer].unsqueeze(0).to(device, dtype))
    except Refused as err:
        raise InvalidInput(f"layer {layer} cannot be replayed: {err}") from None


def _where(call: LayerCall) -> tuple[torch.device, torch.dtype]:
    weight = next(call.module.parameters())
    return weight.device, weight.dtype


def layer_weights(
    captured: LayerCapture, heads: list[int] | None = None, allowed: Tensor | None = None
) -> Tensor:
    """(heads, T_q, T_k) weights of these heads (all by default), one head at a time on the
    capture's device: besides the answer it holds one head's scores. `allowed` is the layer's
    mask (LayerCapture.allowed, passed where the caller has it already)."""
    chosen = list(range(captured.n_heads)) if heads is None else heads
    mask = captured.allowed() if allowed is None else allowed
    if mask is not None:
        mask = mask.to(captured.q.device)
    out = captured.q.new_empty(len(chosen), captured.seq, captured.k.shape[1])
    for i, head in enumerate(chosen):
        out[i] = head_weights(
            captured.q[head],
            captured.k[head // captured.group],
            captured.scale,
            mask,
            softcap=captured.softcap,
            sink=None if captured.sinks is None else captured.sinks[head],
            bias=None if captured.bias is None else captured.bias[head],
        )
    return out


def replayed_maps(
    calls: list[LayerCall] | None,
    hidden_inputs: Tensor,
    layer: int,
    heads: list[int] | None = None,
) -> Tensor:
    """One layer's attention weights (heads, seq, seq), float32 on the host, replayed from the
    pass's own call of that layer: what a forward pass without attention output leaves to show.
    Equal to the model's own maps bit for bit in float32 (tests/atlas_engine/models/test_capture.py)."""
    captured = layer_capture(calls, hidden_inputs, layer)
    with torch.inference_mode():
        weights = layer_weights(captured, heads)
    return weights.to("cpu", torch.float32)


class NotBlockwise(InvalidInput):
    """A layer whose maps attention_core.tiles cannot read a block at a time (replayed_qk)."""


@dataclass(frozen=True)
class HeadQK:
    """One layer's replayed queries and keys, paired per query head (a GQA key head repeated
    for each query head it serves), on the model's device, with what the heads add to q·k."""

    q: Tensor  # (heads, seq, head_dim), after the model's q norm and RoPE
    k: Tensor  # (heads, seq, head_dim): each query head's own key head
    factor: float  # the model's score scale
    extras: Extras = PLAIN  # softcap, each head's sink, the layer's mask beyond causal


def replayed_qk(
    model_id: str,
    calls: list[LayerCall] | None,
    hidden_inputs: Tensor,
    layer: int,
    heads: list[int],
) -> HeadQK:
    """The queries and keys of these heads of one layer, for reading its maps a block at a
    time (attention_core.tiles), with the layer's softcap, sinks and mask beyond causal. A
    layer that adds a position bias (T5, held to 512 tokens: its maps open whole) is refused."""
    captured = layer_capture(calls, hidden_inputs, layer)
    if captured.bias is not None:
        raise NotBlockwise(
            f"'{model_id}' layer {layer} adds a position bias to its scores: reading its maps a "
            "block at a time (Deep zoom, head statistics over long texts) does not take it into "
            "account. Its maps open in full in the explorer."
        )
    q, k = captured.q[heads], captured.k[[h // captured.group for h in heads]]
    sinks = None if captured.sinks is None else captured.sinks[heads].float()
    extras = Extras(softcap=captured.softcap, sinks=sinks, mask=mask_blocks(captured))
    return HeadQK(q=q.float(), k=k.float(), factor=captured.scale, extras=extras)


def mask_blocks(captured: LayerCapture) -> MaskBlock | None:
    """The layer's mask a block at a time, where it hides more than causality does (a sliding
    window, a chunk): None for a plain causal or full mask."""
    mask = captured.mask
    if mask is None:
        return None
    if isinstance(mask, MaskRecipe):
        return None if mask.plain else mask.block
    allowed = captured.allowed()
    return lambda r0, r1, c0, c1: allowed[r0:r1, c0:c1].to(captured.q.device)


def visible_keys(calls: list[LayerCall] | None, layer: int, seq: int) -> VisibleKeys | None:
    """The keys each query of a layer may read, a block of rows at a time, where its mask
    (the recipe the pass recorded, no replay needed) hides more than causality does: a
    sliding window. None for a plain causal or full mask, and where no call was kept."""
    if not calls:
        return None
    call = calls[layer]
    recipe = next(
        (v for v in (*call.args, *call.kwargs.values()) if isinstance(v, MaskRecipe)), None
    )
    if recipe is None or recipe.plain:
        return None
    return lambda r0, r1: recipe.block(r0, r1, 0, seq).sum(-1)
