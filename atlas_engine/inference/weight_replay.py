"""A layer re-projected from the model's weights, for the lab pages that change the weights
themselves (K/V heads pooled into fewer, RoPE switched off, one text's queries on another's
keys, a head's W_O): these need each family's weight layout (atlas_engine.models.families), so they
work on the families listed in REPLAY_FAMILIES. Every view that replays a layer as the model
ran it uses the capture path instead (atlas_engine.inference.replay), which needs no family code.

The projection runs in float32 from the model's own weights (upcast from half precision) and
from the hidden states the forward pass captured (float32 on the host, moved to the model's
device here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from atlas_engine.errors import InvalidInput
from atlas_engine.models import families
from atlas_engine.models.placement import model_device
from atlas_engine.models.registry import REPLAY_FAMILIES, Family
from attention_core import causal_mask, sliding_window_mask
from attention_core.replay import QKProjection, Rope


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
            f"This is a {model.config.model_type} model: the lab pages that change a head's "
            f"weights (pooled K/V heads, RoPE off, cross-attention, head anatomy) need a "
            f"{REPLAY_FAMILIES} model; the explorer replays its heads as they ran"
        )
    device = model_device(model)
    seq = hidden_inputs.shape[1]
    rope = families.rope(model, family, seq)
    return LayerInputs(
        hidden=hidden_inputs[layer].unsqueeze(0).to(device),
        proj=families.qk_projection(model, family, layer),
        rope=rope,
        mask=_mask(model, family, causal, seq, device),
    )


def _mask(model: nn.Module, family: Family, causal: bool, seq: int, device) -> Tensor | None:
    """The layers' mask: causal for decoders, None for encoders; a Mistral-style sliding window
    of w keys (the query and the w - 1 before it, as transformers masks it) where the config
    sets one that applies."""
    if not causal:
        return None
    config = model.config
    window = getattr(config, "sliding_window", None) if family is Family.LLAMA else None
    if isinstance(window, int) and window > 0 and getattr(config, "use_sliding_window", True):
        return sliding_window_mask(seq, window=window - 1, causal=True, device=device)
    return causal_mask(seq, device=device)
