"""What replaying one layer of a forward pass needs, placed on the model's device.

A replay runs in float32 from the model's own weights (upcast from half precision, so the
replay shows what the weights compute without a second rounding) and from the hidden states
the forward pass captured (float32 on the host, moved back to the model's device here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from app.errors import InvalidInput
from app.models import families
from app.models.placement import model_device
from app.models.registry import REPLAY_FAMILIES, Family
from attention_core import causal_mask
from attention_core.replay import QKProjection, Rope, project_qk, replay_weights


@dataclass(frozen=True)
class LayerInputs:
    """One layer's replay inputs, all on the model's device in float32."""

    hidden: Tensor  # (1, seq, d_model), what entered the layer's attention
    proj: QKProjection  # the layer's q, k, v projections
    rope: Rope | None  # Llama family only
    mask: Tensor | None  # (seq, seq) causal for decoders, None for encoders

    @property
    def device(self) -> torch.device:
        return self.hidden.device


def layer_inputs(
    model: nn.Module, family: Family, causal: bool, hidden_inputs: Tensor, layer: int
) -> LayerInputs:
    """hidden_inputs: (layers, seq, d_model) from a forward pass (ForwardResult.hidden_inputs).
    A model of an architecture without an adapter (Family.OTHER) is refused, saying why."""
    if not family.replayable:
        raise InvalidInput(
            f"This is a {model.config.model_type} model: Atlas shows its attention maps, but "
            "replaying a head from its weights (the explorer's Query · Key, Mask, Without √d, Value-weighted "
            "and Step by step views, and the lab pages that use a model's heads) "
            f"needs a {REPLAY_FAMILIES} model"
        )
    device = model_device(model)
    seq = hidden_inputs.shape[1]
    rope = families.rope(model, family, seq)
    return LayerInputs(
        hidden=hidden_inputs[layer].unsqueeze(0).to(device),
        proj=families.qk_projection(model, family, layer),
        rope=rope,
        mask=causal_mask(seq, device=device) if causal else None,
    )


def replayed_maps(
    model: nn.Module,
    family: Family,
    causal: bool,
    hidden_inputs: Tensor,
    layer: int,
    heads: list[int] | None = None,
) -> Tensor:
    """One layer's attention weights (heads, seq, seq), float32 on the host, replayed from the
    hidden states that entered it: what a forward pass without attention output leaves to show.
    Within REPLAY_MAX_ABS_DIFF of the model's own maps (tests/app/test_attention_fidelity.py)."""
    inputs = layer_inputs(model, family, causal, hidden_inputs, layer)
    with torch.inference_mode():
        weights = replay_weights(
            inputs.hidden, inputs.proj, inputs.mask, rope=inputs.rope, heads=heads
        )
    return weights.to("cpu", torch.float32)


@dataclass(frozen=True)
class HeadQK:
    """One layer's replayed queries and keys, paired per query head (a GQA key head repeated
    for each query head it serves), on the model's device in float32."""

    q: Tensor  # (heads, seq, head_dim), after RoPE where the model has it
    k: Tensor  # (heads, seq, head_dim): each query head's own key head
    factor: float  # the model's score scale


def replayed_qk(
    model: nn.Module,
    family: Family,
    causal: bool,
    hidden_inputs: Tensor,
    layer: int,
    heads: list[int],
) -> HeadQK:
    """The queries and keys of these heads of one layer, for reading its maps a block at a
    time (attention_core.tiles): what replayed_maps computes before the scores."""
    inputs = layer_inputs(model, family, causal, hidden_inputs, layer)
    with torch.inference_mode():
        q, k = project_qk(inputs.hidden, inputs.proj, inputs.rope)  # (1, H|Hkv, T, hd)
    group = inputs.proj.n_heads // inputs.proj.n_kv_heads
    return HeadQK(q=q[0, heads], k=k[0, [h // group for h in heads]], factor=inputs.proj.scale)
