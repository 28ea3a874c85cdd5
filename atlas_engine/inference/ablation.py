"""One forward pass with chosen heads switched off, for comparison with the cached one.

A head is switched off in what its layer's attention function returns (atlas_engine.models.capture):
(batch, seq, heads, head_dim_v), which the layer then flattens into its output projection's
input, head h in columns h*hd ... (h+1)*hd. "zero" sets the head's output to 0, "mean" replaces
it at every position by its mean over the text's positions. Nothing else changes, so the
ablated layer's own maps equal the unablated run's; later layers see the change. No code per
architecture: any model the capture path replays can be ablated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from atlas_engine.inference.forward import stack_to_host, tokenize
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device

AblationMode = Literal["zero", "mean"]


@dataclass(frozen=True)
class AblatedRun:
    attentions: Tensor  # (layers, heads, seq, seq) float32 on the host
    last_hidden: Tensor  # (seq, d_model) float32 on the host, what the LM head reads


def switch_off(x: Tensor, heads: list[int], mode: AblationMode) -> Tensor:
    """x: (batch, seq, n_heads, head_dim) -> the same with `heads` zeroed or mean-replaced."""
    out = x.clone()
    for h in heads:
        out[:, :, h] = 0 if mode == "zero" else x[:, :, h].mean(dim=-2, keepdim=True)
    return out


class _Ablating(capture.Recorder):
    """Each layer's attention as the model computes it, with the chosen heads' outputs
    switched off in the layers named."""

    def __init__(self, heads: dict[int, list[int]], mode: AblationMode) -> None:
        super().__init__()
        self.heads = heads
        self.mode = mode

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        chosen = self.heads.get(id(module))
        return (out, weights) if chosen is None else (switch_off(out, chosen, self.mode), weights)


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
    by_module = {id(loaded.attention_layers[layer]): hs for layer, hs in heads.items()}
    with loaded.lock, torch.inference_mode(), capture.recording(_Ablating(by_module, mode)):
        output = loaded.model(
            **{k: v.to(device) for k, v in inputs.items()}, output_attentions=True
        )
    last_hidden = output.last_hidden_state[0].to("cpu", torch.float32)
    layers = list(output.attentions)
    del output
    return AblatedRun(attentions=stack_to_host(layers), last_hidden=last_hidden)
