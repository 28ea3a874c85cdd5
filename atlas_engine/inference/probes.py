"""A pass over a text with hooks that keep what the forward cache does not: the size of the
residual stream block by block, and of what each block's attention and MLP add to it (the
lab's forward-pass page), with no code per architecture.

The cached pass (atlas_engine.inference.forward) keeps each attention block's input and, for a
model with an LM head, its last hidden state; what a block's attention and MLP add to the
stream, and the stream itself in a pre-norm decoder (whose attention reads a normalised copy),
are gone once it ends. A probe runs the model once more under its lock and reads each block as
it finishes, by which tensors are equal (as atlas_engine.inference.residual reads a layout):

- the attention's write is the output of the one module with a weight whose input is the
  heads' outputs side by side (W_O), or of the norm the block applies to it (Gemma, OLMo 2);
- in a pre-norm block the stream leaving it is x + attention + m, and m (the MLP's write) is
  the output of a module inside the block that closes that sum;
- in a post-norm block (BERT) a norm reads x + W_O's output, and the block's last norm reads
  that norm's output + m.

Only the current block's tensors are held, and only norms are kept after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import ForwardResult, tokenize
from atlas_engine.inference.residual import (
    HeadOutputs,
    first_tensor,
    layout_of,
    on_this_thread,
    same_tensor,
)
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device

SUM_ULPS = 16
"""How close a sum of tensors must come to a third to be read as that sum, in units of the
dtype's epsilon times the largest value: additions in another order (GPT-NeoX adds its MLP,
then its attention, then the stream) round differently, by about one ulp in half precision;
16 ulps are 1.9e-6 in float32, 0.12 in bfloat16 at the largest value."""


def _norms(x: Tensor) -> Tensor:
    """(1, seq, d) -> (seq,) float32 on the host: each token's vector length."""
    return x[0].detach().float().norm(dim=-1).cpu()


def _close(total: Tensor, target: Tensor | None) -> bool:
    if target is None or total.shape != target.shape:
        return False
    scale = float(target.abs().max().clamp_min(1e-12))
    tolerance = SUM_ULPS * torch.finfo(target.dtype).eps * scale
    return float((total - target).abs().max()) <= tolerance


@dataclass(frozen=True)
class StreamNorms:
    """Each token's vector length through a real pass, float32 on the host."""

    entering: Tensor  # (seq,): what enters the first block (the embeddings, plus positions
    # and a LayerNorm in BERT-style models)
    after_block: Tensor  # (layers, seq): the residual stream leaving each block
    attention_added: Tensor  # (layers, seq): what each block's attention adds
    mlp_added: Tensor  # (layers, seq): what each block's MLP adds
    final: Tensor | None  # (seq,): after the final norm; None where the model has none
    renormalised: bool  # the blocks normalise the stream after adding to it (post-norm)


class _Block:
    """One block's tensors while it runs: its input and every inner module's (input, output)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.x: Tensor | None = None
        self.io: list[tuple[Tensor | None, Tensor | None]] = []
        self.weighted: list[tuple[Tensor | None, Tensor | None]] = []


def _writes(layer: int, block: _Block, y: Tensor, heads: Tensor) -> tuple[Tensor, Tensor, bool]:
    """(attention's write, MLP's write, whether the block renormalises the stream), the writes
    (1, T, d) each, read off one finished block."""
    joined = heads.reshape(*heads.shape[:2], -1)
    into_w_o = [out for inp, out in block.weighted if same_tensor(inp, joined)]
    if len(into_w_o) != 1:
        raise InvalidInput(f"layer {layer}'s heads' outputs do not enter one linear map")
    a = into_w_o[0]
    normed = [out for inp, out in block.io if same_tensor(inp, a) and out is not None
              and out.shape == a.shape and not torch.equal(out, a)]  # fmt: skip
    write = normed[0] if normed else a
    x = block.x
    outputs = [out for _, out in block.io if out is not None]
    for m in outputs:  # pre-norm: y = x + write + m
        if m.shape == y.shape and _close(x + write + m, y):
            return write, m, False
    after_attention = [out for inp, out in block.io if _close(x + a, inp)]  # post-norm
    for h in after_attention:
        for m in outputs:
            if m.shape == h.shape and any(_close(h + m, inp) for inp, _ in block.io):
                return a, m, True
    raise InvalidInput(
        f"layer {layer} does not add its attention and its MLP to the stream in a way Atlas "
        "can read (neither x + attention + MLP nor a norm after each)"
    )


def stream_norms(loaded: LoadedModel, text: str) -> StreamNorms:
    """The lengths of the residual stream and of what each block's attention and MLP add to
    it, over `text` (one whole pass); InvalidInput, saying why, where the blocks cannot be
    read."""
    layout = layout_of(loaded)
    if not layout.blocks:
        raise InvalidInput(f"'{loaded.id}': {layout.lens_refusal}")
    model = loaded.model
    layer_of = {id(m): i for i, m in enumerate(loaded.attention_layers)}
    recorder = HeadOutputs(layer_of)
    index = {id(b): i for i, b in enumerate(layout.blocks)}
    current = _Block()
    rows: dict[str, list[Tensor | None]] = {n: [None] * len(index) for n in ("after", "a", "m")}
    kept: dict[str, Tensor] = {}
    renormalised: set[bool] = set()

    def enter(block, args, kwargs):
        current.reset()
        current.x = first_tensor(args, kwargs)
        if index[id(block)] == 0:
            kept["entering"] = _norms(current.x)

    def watch(module, args, kwargs, output):
        pair = (first_tensor(args, kwargs), first_tensor((output,)))
        current.io.append(pair)
        if hasattr(module, "weight"):
            current.weighted.append(pair)

    def leave(block, _args, _kwargs, output):
        layer = index[id(block)]
        y = first_tensor((output,))
        attention, mlp, post = _writes(layer, current, y, recorder.outs.pop(layer))
        renormalised.add(post)
        rows["after"][layer], rows["a"][layer], rows["m"][layer] = (
            _norms(y), _norms(attention), _norms(mlp))  # fmt: skip
        current.reset()

    def final(_module, _args, output):
        kept["final"] = _norms(first_tensor((output,)))

    inputs, _ = tokenize(loaded, text, None)
    device = model_device(model)
    with loaded.lock:  # the hooks are on only while this pass holds the model
        handles = []
        try:
            for block in layout.blocks:
                handles.append(
                    block.register_forward_pre_hook(on_this_thread(enter), with_kwargs=True)
                )
                handles.append(block.register_forward_hook(on_this_thread(leave), with_kwargs=True))
                handles += [m.register_forward_hook(on_this_thread(watch), with_kwargs=True)
                            for m in block.modules() if m is not block]  # fmt: skip
            if layout.final_norm is not None:
                handles.append(layout.final_norm.register_forward_hook(on_this_thread(final)))
            with torch.inference_mode(), capture.recording(recorder):
                model(**{k: v.to(device) for k, v in inputs.items()})
        finally:
            for handle in handles:
                handle.remove()
    return StreamNorms(
        entering=kept["entering"],
        after_block=torch.stack(rows["after"]),
        attention_added=torch.stack(rows["a"]),
        mlp_added=torch.stack(rows["m"]),
        final=kept.get("final"),
        renormalised=renormalised == {True},
    )


def probe_bytes(loaded: LoadedModel, seq: int) -> int:
    """What a probe's pass may hold at once, known before it runs: a pass's working set with
    every layer's maps kept (an upper bound; the eager kernel holds one layer's at a time)."""
    return ForwardResult.nbytes_for(loaded.arch, seq, replayed=False)
