"""Direct logit attribution: each head's, each MLP's and the embeddings' direct contribution to
one logit (or the difference of two) at one position.

The convention is TransformerLens's (attention_core.direct): the final norm's scale frozen at
its value on the real pass, and likewise a norm a family applies to the attention's output
before the stream adds it. What is not a head's, an MLP's or the embeddings' is a bias term
(each layer's output-projection bias, the final norm's beta, the unembedding's bias), and all
of them sum to the real logit: `Attribution.total` against `Attribution.logit`, which a test
holds to float32 rounding. Everything after the pass is computed in float64 (the output
projections are copied to float64 for it: d × d numbers each).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from atlas_engine.inference.residual import Layout, Stream, layout_of
from atlas_engine.models.loader import LoadedModel
from attention_core.direct import head_writes, logit_direction, source_writes


@dataclass(frozen=True)
class Attribution:
    """Direct contributions to the logit (difference) at one position, float64 on the host."""

    logit: float  # the real logit (difference) the model computed (float32)
    embeddings: float
    heads: Tensor  # (layers, heads)
    attention_bias: Tensor  # (layers,): the output projection's bias, through any post-norm
    mlps: Tensor  # (layers,): the rest of each block (its MLP)
    bias: float  # the final norm's beta and the unembedding's bias

    @property
    def total(self) -> float:
        """The contributions' sum, which equals `logit` up to float32 rounding."""
        parts = self.heads.sum() + self.attention_bias.sum() + self.mlps.sum()
        return float(parts) + self.embeddings + self.bias


def real_logit(layout: Layout, last_hidden: Tensor, target: int, contrast: int | None) -> float:
    """The model's own logit (difference) from its output at one position, (d,), before any
    final softcap (Gemma 2 caps the logits after the linear map)."""
    with torch.inference_mode():
        logits = layout.unembed(last_hidden)
        return float(logits[target] - (logits[contrast] if contrast is not None else 0.0))


def in_float64(module: nn.Module):
    """The linear map `module` computes, in float64: x (..., in) -> (..., out)."""
    weight, bias = module.weight.double(), getattr(module, "bias", None)
    bias = bias.double() if bias is not None else None
    if isinstance(module, nn.Linear):
        return lambda x: nn.functional.linear(x, weight, bias)
    if type(module).__name__ == "Conv1D":  # GPT-2's: weight (in, out)
        return lambda x: x @ weight + bias
    return copy.deepcopy(module).double()


def _read_direction(layout: Layout, stream: Stream, position: int, u: Tensor) -> Tensor:
    """The direction d in the last stream's space with piece · d = its direct contribution."""
    final = layout.final_affine
    if final is None:
        return u
    scale = final.scale(stream.outputs[-1][0, position], stream.last_hidden[0, position])
    return final.reads(u, scale)


def _through_post_norm(layout: Layout, stream: Stream, layer: int, position: int):
    """f(piece (..., d)) -> the piece as the stream adds it, and the post-norm's beta (or 0)."""
    post = layout.post_norms[layer]
    if post is None:
        return (lambda c: c), 0.0
    _, norm = post
    a, w = stream.projected[layer][0, position], stream.writes[layer][0, position]
    scale = norm.scale(a, w)
    return (lambda c: norm.linear(c, scale)), norm.beta.double()


@torch.inference_mode()
def attribute(
    loaded: LoadedModel, stream: Stream, position: int, target: int, contrast: int | None
) -> Attribution:
    """The direct contributions at `position` of a pass taken apart (batch 1)."""
    layout = layout_of(loaded)
    u = logit_direction(layout.unembed.weight, target, contrast).double()
    direction = _read_direction(layout, stream, position, u)
    bias = 0.0
    if layout.unembed.bias is not None:
        b = layout.unembed.bias.double()
        bias += float(b[target] - (b[contrast] if contrast is not None else 0.0))
    if layout.final_affine is not None:
        bias += float(layout.final_affine.beta.double() @ u)
    n = len(layout.blocks)
    heads, attention_bias, mlps = [], [], []
    with torch.inference_mode():
        for layer in range(n):
            project = in_float64(layout.projections[layer])
            out = stream.heads[layer][0, position].double()  # (heads, head_dim)
            writes, projection_bias = head_writes(out, project)
            through, beta = _through_post_norm(layout, stream, layer, position)
            heads.append(through(writes) @ direction)
            attention_bias.append((through(projection_bias) + beta) @ direction)
            mlps.append(stream.rest(layer)[0, position].double() @ direction)
        embeddings = float(stream.inputs[0][0, position].double() @ direction)
    return Attribution(
        logit=real_logit(layout, stream.last_hidden[0, position], target, contrast),
        embeddings=embeddings,
        heads=torch.stack(heads).cpu(),
        attention_bias=torch.stack(attention_bias).cpu(),
        mlps=torch.stack(mlps).cpu(),
        bias=bias,
    )


@torch.inference_mode()
def head_sources(
    loaded: LoadedModel,
    stream: Stream,
    layer: int,
    head: int,
    position: int,
    target: int,
    contrast: int | None,
) -> Tensor:
    """One head's direct contribution at `position` split by the key it read: (T,) float64 on
    the host, summing to the head's cell of `attribute` (its output is Σ_j α_j v_j). `stream`
    must hold the layer's weights and values (run_stream(..., weights_of=layer))."""
    layout = layout_of(loaded)
    u = logit_direction(layout.unembed.weight, target, contrast).double()
    direction = _read_direction(layout, stream, position, u)
    heads = stream.heads[layer].shape[2]
    group = heads // stream.values.shape[1]
    with torch.inference_mode():
        weights = stream.weights[0, head, position].double()  # (T,)
        values = stream.values[0, head // group].double()  # (T, head_dim)
        rows = source_writes(weights, values, head, heads, in_float64(layout.projections[layer]))
        through, _ = _through_post_norm(layout, stream, layer, position)
        return (through(rows) @ direction).cpu()
