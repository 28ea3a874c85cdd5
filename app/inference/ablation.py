"""One forward pass with chosen heads switched off, for comparison with the cached one.

A head is switched off where its output enters the layer's output projection (the heads'
outputs side by side, head h in columns h*hd ... (h+1)*hd): "zero" sets its columns to 0,
"mean" replaces them at every position by their mean over the text's positions. Nothing else
changes, so the ablated layer's own maps equal the unablated run's; later layers see the change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from app.inference.forward import stack_to_host, tokenize
from app.models.families import output_projections
from app.models.loader import LoadedModel
from app.models.placement import model_device

AblationMode = Literal["zero", "mean"]


@dataclass(frozen=True)
class AblatedRun:
    attentions: Tensor  # (layers, heads, seq, seq) float32 on the host
    last_hidden: Tensor  # (seq, d_model) float32 on the host, what the LM head reads


def switch_off(x: Tensor, heads: list[int], head_dim: int, mode: AblationMode) -> Tensor:
    """x: (batch, seq, n_heads * head_dim) -> the same with `heads` zeroed or mean-replaced."""
    out = x.clone()
    for h in heads:
        cols = slice(h * head_dim, (h + 1) * head_dim)
        out[..., cols] = 0 if mode == "zero" else x[..., cols].mean(dim=-2, keepdim=True)
    return out


def run_ablated(
    loaded: LoadedModel,
    text: str,
    text_pair: str | None,
    heads: dict[int, list[int]],
    mode: AblationMode,
) -> AblatedRun:
    """The model over `text` with heads[layer] switched off in each layer named."""
    inputs, _ = tokenize(loaded, text, text_pair)
    device = model_device(loaded.model)
    projections = output_projections(loaded.model, loaded.family)
    head_dim = loaded.arch.head_dim

    def hook_for(layer_heads: list[int]):
        def hook(_module, args):
            return (switch_off(args[0], layer_heads, head_dim, mode), *args[1:])

        return hook

    with loaded.lock:
        handles = [
            projections[layer].register_forward_pre_hook(hook_for(hs))
            for layer, hs in heads.items()
        ]
        try:
            with torch.inference_mode():
                output = loaded.model(
                    **{k: v.to(device) for k, v in inputs.items()}, output_attentions=True
                )
        finally:
            for handle in handles:
                handle.remove()
    last_hidden = output.last_hidden_state[0].to("cpu", torch.float32)
    layers = list(output.attentions)
    del output
    return AblatedRun(attentions=stack_to_host(layers), last_hidden=last_hidden)
