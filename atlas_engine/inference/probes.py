"""A pass over a text with hooks that keep what the forward cache does not: the size of the
residual stream block by block (the lab's forward-pass page).

The cached pass (atlas_engine.inference.forward) keeps each attention block's input and, for a model
with an LM head, its last hidden state; what a block's attention and MLP add to the stream,
and the stream itself in a pre-norm decoder (whose attention reads a normalised copy), are
gone once it ends. A probe runs the model once more under its lock, hooks the modules that
compute them, keeps only those tensors (or their norms) and lets go of the rest.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from atlas_engine import compute
from atlas_engine.inference.forward import ForwardResult, tokenize
from atlas_engine.models.families import (
    blocks,
    final_norm,
    hidden_input,
    mlp_outputs,
    output_projections,
)
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device


class _Enough(Exception):
    """Raised from a hook once everything the probe wants is captured: the rest of the pass
    is skipped."""


def _tensor(output: object) -> Tensor:
    """A module's main output, whether it returns a tensor or a tuple starting with one."""
    return output[0] if isinstance(output, tuple) else output


def _norms(x: Tensor) -> Tensor:
    """(1, seq, d) -> (seq,) float32 on the host: each token's vector length."""
    return x[0].detach().float().norm(dim=-1).cpu()


def _run(loaded: LoadedModel, text: str, hooks: list[tuple[nn.Module, str, object]]) -> None:
    """The model once over `text` with hooks [(module, "pre" | "post", fn)] in place, under its
    lock (hooks are per call). A hook acts only at the pass's own compute depth (a pass run
    inside another on the same model is not this one: atlas_engine.compute.run_beside)."""
    inputs, _ = tokenize(loaded, text, None)
    device = model_device(loaded.model)
    depth = compute.depth()

    def own(fn):
        def hook(*args):
            if compute.depth() == depth:
                return fn(*args)
            return None

        return hook

    with loaded.lock:
        handles = []
        try:
            for module, when, fn in hooks:
                if when == "pre":
                    handles.append(module.register_forward_pre_hook(own(fn), with_kwargs=True))
                else:
                    handles.append(module.register_forward_hook(own(fn)))
            with torch.inference_mode(), suppress(_Enough):
                loaded.model(**{k: v.to(device) for k, v in inputs.items()})
        finally:
            for handle in handles:
                handle.remove()


@dataclass(frozen=True)
class StreamNorms:
    """Each token's vector length through a real pass, float32 on the host."""

    entering: Tensor  # (seq,): what enters the first block (the embeddings, plus positions
    # and a LayerNorm in BERT-style models)
    after_block: Tensor  # (layers, seq): the residual stream leaving each block
    attention_added: Tensor  # (layers, seq): each block's attention output
    mlp_added: Tensor  # (layers, seq): each block's MLP output
    final: Tensor | None  # (seq,): after the final norm; None where the model has none


def stream_norms(loaded: LoadedModel, text: str) -> StreamNorms:
    """The lengths of the residual stream and of what each block's attention and MLP add to
    it, over `text` (one whole pass)."""
    model, family = loaded.model, loaded.family
    layers = len(blocks(model, family))
    kept: dict[str, Tensor] = {}
    rows = {name: [None] * layers for name in ("after", "attention", "mlp")}

    def entering(_module, args, kwargs):
        kept["entering"] = _norms(hidden_input(args, kwargs))

    def into(name: str, layer: int):
        def hook(_module, _args, output):
            rows[name][layer] = _norms(_tensor(output))

        return hook

    def final(_module, _args, output):
        kept["final"] = _norms(_tensor(output))

    hooks = [(blocks(model, family)[0], "pre", entering)]
    for name, modules in (
        ("after", blocks(model, family)),
        ("attention", output_projections(model, family)),
        ("mlp", mlp_outputs(model, family)),
    ):
        hooks += [(module, "post", into(name, i)) for i, module in enumerate(modules)]
    norm = final_norm(model, family)
    if norm is not None:
        hooks.append((norm, "post", final))
    _run(loaded, text, hooks)
    return StreamNorms(
        entering=kept["entering"],
        after_block=torch.stack(rows["after"]),
        attention_added=torch.stack(rows["attention"]),
        mlp_added=torch.stack(rows["mlp"]),
        final=kept.get("final"),
    )


def probe_bytes(loaded: LoadedModel, seq: int) -> int:
    """What a probe's pass may hold at once, known before it runs: a pass's working set with
    every layer's maps kept (an upper bound; the eager kernel holds one layer's at a time)."""
    return ForwardResult.nbytes_for(loaded.arch, seq, replayed=False)
