"""One real layer taken apart for the lab pages that change a head: its K/V heads pooled into
fewer, its rotary embedding switched off, one text's queries on another's keys, its heads'
outputs joined and mixed by the output projection.

Everything starts from what the layer's attention function received in the text's pass
(atlas_engine.models.capture): q after the model's q norm and RoPE, k and v at the key/value
head count, the layer's mask, scale, softcap, sinks and position bias. So these pages need no
code per family: they work on every model whose heads replay. What they change is changed
there:

- pooled K/V heads average the keys and values the layer computed (after any k norm and
  RoPE), group by group. Projections and RoPE are linear, so where the model has no k norm
  this is exactly the GQA paper's pooling of W_K and W_V (and their biases); with a k norm
  (Qwen3, Gemma 3, OLMo 2) it pools the normalised keys, which no weight pooling gives.
- RoPE off calls the layer's own attention module again with position embeddings that rotate
  by nothing (sin 0, cos the tables' own scale: 1, or YaRN's attention factor): its q norm, k
  norm and everything else as it ran.
- the output projection W_O is found, not named: in one probe pass it is the module with a
  weight, inside the layer's block, whose input equals the heads' outputs side by side.

Numbers are float32 (a half-precision model's tensors upcast exactly)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.pytorch_utils import Conv1D

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import ForwardResult, tokenize
from atlas_engine.inference.replay import layer_capture, layer_weights
from atlas_engine.inference.residual import (
    HeadOutputs,
    block_of,
    first_tensor,
    on_this_thread,
    same_tensor,
)
from atlas_engine.models import capture
from atlas_engine.models.capture import LayerCall, LayerCapture, Refused
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from attention_core.heads import pool_kv_heads
from attention_core.modern import head_output, head_weights


def _float32(captured: LayerCapture) -> LayerCapture:
    def up(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.float()

    return replace(
        captured, q=up(captured.q), k=up(captured.k), v=up(captured.v),
        sinks=up(captured.sinks), bias=up(captured.bias),
    )  # fmt: skip


@dataclass(frozen=True)
class LabLayer:
    """One layer of a text's pass, as its attention function received it (float32, on the
    model's device), with the pass it came from."""

    result: ForwardResult
    layer: int
    captured: LayerCapture  # q (H, T, hd), k and v (H_kv, T, hd), the mask, scale ...
    hidden: Tensor  # (1, T, d_model): what entered the layer's attention module

    @property
    def rotary(self) -> bool:
        """Whether the layer's module is handed RoPE's (cos, sin) to rotate q and k with."""
        return _position_embeddings(self.result.calls[self.layer]) is not None

    def weights(self, heads: list[int] | None = None) -> Tensor:
        """(heads, T, T) weights of these heads (all by default), as the model computed them."""
        return layer_weights(self.captured, heads)

    def model_maps(self) -> Tensor:
        """(H, T, T): the pass's own maps of this layer, on the replay's device to compare."""
        return self.result.layer_maps(self.layer).to(self.hidden.device)


def lab_layer(loaded: LoadedModel, result: ForwardResult, layer: int) -> LabLayer:
    """Layer `layer` of `result` (a pass of `loaded` that kept its layers' calls)."""
    captured = layer_capture(result.calls, result.hidden_inputs, layer)
    hidden = result.hidden_inputs[layer].unsqueeze(0).to(captured.q.device, torch.float32)
    return LabLayer(result, layer, _float32(captured), hidden)


def _position_embeddings(call: LayerCall) -> tuple[Tensor, Tensor] | None:
    found = call.kwargs.get("position_embeddings")
    if isinstance(found, tuple) and len(found) == 2 and all(isinstance(t, Tensor) for t in found):
        return found
    return None


def unrotated(lay: LabLayer) -> LayerCapture:
    """The layer's capture again, its module called with position embeddings that rotate by
    nothing (cos 1, sin 0): q and k as they were before RoPE. InvalidInput where the module is
    not handed RoPE's tables (it has no rotary embedding, or rotates inside its own code)."""
    call = lay.result.calls[lay.layer]
    tables = _position_embeddings(call)
    if tables is None:
        raise InvalidInput(
            "this model has no rotary embedding handed to its attention layers (its positions "
            "are learned vectors added to the input, or a bias on the scores): pick a model "
            "with RoPE (SmolLM2, Gemma 3)"
        )
    cos, sin = tables
    # A rotation by nothing with the tables' own scale (YaRN and longrope multiply cos and sin
    # by an attention factor; default RoPE's is 1, kept exact).
    scale = (cos.double() ** 2 + sin.double() ** 2).sqrt()
    unit = bool(((scale - 1).abs() <= 1e-6).all())
    still = (torch.ones_like(cos) if unit else scale.to(cos.dtype), torch.zeros_like(sin))
    plain = LayerCall(call.module, call.args, {**call.kwargs, "position_embeddings": still})
    weight = next(call.module.parameters())
    hidden = lay.result.hidden_inputs[lay.layer].unsqueeze(0).to(weight.device, weight.dtype)
    try:
        return _float32(capture.capture_layer(plain, hidden))
    except Refused as err:
        raise InvalidInput(f"layer {lay.layer} cannot be replayed: {err}") from None


def pooled(captured: LayerCapture, kv_heads: int) -> LayerCapture:
    """The capture with its keys and values averaged into `kv_heads` heads (consecutive groups,
    as the GQA paper pools a checkpoint): query head h then reads pooled head
    h // (H / kv_heads)."""
    own = captured.k.shape[0]
    return replace(
        captured,
        k=pool_kv_heads(captured.k, own, kv_heads),
        v=pool_kv_heads(captured.v, own, kv_heads),
    )


def head_outputs(captured: LayerCapture, weights: Tensor) -> Tensor:
    """(H, T, hd_v): each head's weights (H, T, T) times the values of its K/V head."""
    values = captured.v.repeat_interleave(captured.group, dim=0)  # (H, T, hd_v)
    return head_output(weights, values)


def cross(a: LayerCapture, b: LayerCapture, rotary: bool) -> tuple[Tensor, Tensor]:
    """A's queries over B's keys and values, through the same layer: ((H, T_a, T_b) weights,
    (H, T_a) lengths of what each head writes). Every key is visible (encoders), with the
    layer's scale and softcap; a layer that rotates q and k by position (`rotary`), adds a
    position bias or sinks, or reads a sliding window is refused: a rotation, a bias or a window
    between two texts' positions means nothing."""
    if rotary:
        raise InvalidInput(
            "this layer rotates queries and keys by their positions (RoPE): between two "
            "sentences the rotation would compare positions that have nothing to do with each "
            "other. Pick a model without RoPE (MiniLM)."
        )
    if a.bias is not None or a.sinks is not None:
        raise InvalidInput(
            "this layer adds a position bias or sink logits to its scores, which have no "
            "meaning between two sentences"
        )
    allowed = a.allowed()
    if allowed is not None and not bool(allowed.all()):
        raise InvalidInput(
            "this layer reads only a window of nearby keys (a sliding-window layer): between "
            "two sentences no key is nearby. Pick a global layer."
        )
    k = b.k.repeat_interleave(b.group, dim=0)
    weights = head_weights(a.q, k, a.scale, None, softcap=a.softcap)  # (H, T_a, T_b)
    return weights, head_outputs(b, weights).norm(dim=-1)


@dataclass(frozen=True)
class OwnAttention:
    """One layer's attention as the model computed it on a probe pass, float32 on the host,
    with its output projection in nn.Linear's layout (float32, on the model's device)."""

    weights: Tensor  # (H, T, T): the softmax the model used
    joined: Tensor  # (T, H * hd_v): the heads' outputs side by side, entering W_O
    output: Tensor  # (T, d_model): W_O's output
    w_o: Tensor  # (d_model, H * hd_v)
    b_o: Tensor | None  # (d_model,)
    qkv_bias: bool  # a projection the attention module applies to its input adds a bias


class _BlockDone(Exception):
    """Raised once the layer's block has run: the rest of the probe pass is not wanted."""


def own_attention(loaded: LoadedModel, text: str, layer: int) -> OwnAttention:
    """Layer `layer` of `loaded` over `text` on a probe pass (the cached pass keeps neither the
    heads' outputs nor W_O's output), stopped once the layer's block is done. Every module with
    a weight inside the block is watched as it runs: W_O is the one whose input equals the
    heads' outputs side by side, and the q/k/v projections are the attention module's own
    modules that read its input. Nothing else is kept. Refused, saying why, where no single
    such W_O exists."""
    model = loaded.model
    module = loaded.attention_layers[layer]
    parents = {id(c): m for m in model.modules() for c in m.children()}
    block = block_of(parents, module) or module
    inside = {id(m) for m in module.modules()}
    recorder = HeadOutputs({id(module): layer}, weights_of=layer)
    entering: list[Tensor] = []
    projections: list[tuple[nn.Module, Tensor]] = []
    reads_input: list[nn.Module] = []

    def enter(_module, args, kwargs):
        entering.append(first_tensor(args, kwargs))

    def watch(watched, args, kwargs, output):
        x = first_tensor(args, kwargs)
        out = recorder.outs.get(layer)  # set once the layer's attention function has run
        if out is not None:
            if same_tensor(x, out.reshape(*out.shape[:2], -1)):
                projections.append((watched, first_tensor((output,))))
        elif id(watched) in inside and entering and same_tensor(x, entering[0]):
            reads_input.append(watched)

    def done(*_):
        raise _BlockDone

    inputs, _ = tokenize(loaded, text, None)
    device = model_device(model)
    weighted = [m for m in block.modules() if hasattr(m, "weight") and m is not module]
    with loaded.lock:  # the hooks are on only while this pass holds the model
        handles = [module.register_forward_pre_hook(on_this_thread(enter), with_kwargs=True)]
        handles += [m.register_forward_hook(on_this_thread(watch), with_kwargs=True)
                    for m in weighted]  # fmt: skip
        handles.append(block.register_forward_hook(on_this_thread(done)))
        try:
            with (
                torch.inference_mode(),
                capture.recording(recorder),
                contextlib.suppress(_BlockDone),
            ):
                model(**{k: v.to(device) for k, v in inputs.items()})
        finally:
            for handle in handles:
                handle.remove()
    if len(projections) != 1 or not isinstance(projections[0][0], nn.Linear | Conv1D):
        raise InvalidInput(
            f"layer {layer}'s heads' outputs do not enter one linear map Atlas can read as W_O"
        )
    projection, output = projections[0]
    w_o = projection.weight.T if isinstance(projection, Conv1D) else projection.weight
    out = recorder.outs[layer]  # (1, T, H, hd_v)
    return OwnAttention(
        weights=recorder.weights[0].to("cpu", torch.float32),
        joined=out[0].reshape(out.shape[1], -1).to("cpu", torch.float32),
        output=output[0].to("cpu", torch.float32),
        w_o=w_o.detach().float(),
        b_o=None if projection.bias is None else projection.bias.detach().float(),
        qkv_bias=any(getattr(m, "bias", None) is not None for m in reads_input),
    )


def projected(joined: Tensor, own: OwnAttention) -> Tensor:
    """(T, d_model): joined (T, H * hd_v) through the layer's W_O, as nn.Linear computes it."""
    return F.linear(joined, own.w_o, own.b_o)
