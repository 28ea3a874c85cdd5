"""Edge attribution patching between heads: how much of a metric each path from an earlier
head into a later head's query, key or value carries from a clean text into a corrupted one.

The metric is Patching's (atlas_engine.inference.patching): logit(target) - logit(contrast) at
one position. An edge (u -> v, input p) is head u's write into the residual stream reaching
head v of a later layer only through v's query (p = q), key (k) or value (v). Its score is the
first-order estimate of patching that edge alone from the clean run into the corrupted one
(Syed et al. 2023, as in TransformerLens's edge attribution patching):

    score(u -> v.p) = Σ_t (w_u,t(clean) - w_u,t(corrupted)) · ∂metric/∂x_l,t through v.p

divided by clean - corrupted, so 1 means the edge alone would carry the whole difference. w_u
is what head u adds to the stream (its output through its columns of the output projection,
and through a norm on the attention's output, Gemma 2's and OLMo 2's, with that norm's scale
frozen at the corrupted run's). The gradient through one head's input is the true gradient
(every norm as the model computes it): the metric's gradient at the head's q, k or v, from
one backward pass of the corrupted text, carried back to the layer's input by a replay of the
layer with autograd, batched over the layer's heads. Under GQA a key/value head is one input
its group shares. Decoders with a language-model head whose blocks add to the stream.

Cost: a pass of the clean text, a forward and a backward pass of the corrupted one, and one
replay of each layer's attention with its backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.head_inputs import split_writes
from atlas_engine.inference.residual import (
    HeadOutputs,
    first_tensor,
    layout_of,
    on_this_thread,
    run_stream,
)
from atlas_engine.inference.score_trace import TraceRefused, trace_layout
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device

INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class EdgeScores:
    """Every edge's score (module docstring), float64 on the host. scores[p][l] is
    (l, H, heads_p) for downstream layer l: earlier layer, earlier head, downstream head (p =
    "q": its query heads; "k", "v": its key/value heads)."""

    metric: object  # the patching.Metric used
    clean: float
    corrupted: float
    scores: dict[str, list[Tensor]]


class _Keeping(HeadOutputs):
    """HeadOutputs that also keeps each layer's q, k and v (in autograd's graph)."""

    def __init__(self, layer_of) -> None:
        super().__init__(layer_of)
        self.qkv: dict[int, tuple[Tensor, Tensor, Tensor]] = {}

    def on_call(self, module, q, k, v, mask, kw):
        layer = self.layer_of.get(id(module))
        if layer is not None:
            self.qkv[layer] = (q, k, v)
        return super().on_call(module, q, k, v, mask, kw)


def _graded(loaded: LoadedModel, inputs: dict[str, Tensor], metric) -> dict:
    """The corrupted text's pass with autograd: the metric (a Metric, or a function of the
    pass's output (T, d) that chooses it), its gradient at every layer's q, k and v, every
    layer's input x_l, attention call, heads' outputs and the modules' outputs the writes need
    (projection and any post norm)."""
    layout = trace_layout(loaded)
    attention = loaded.attention_layers
    recorder = _Keeping({id(m): i for i, m in enumerate(attention)})
    calls, streams, io = {}, {}, {}

    def enter(index: int):
        def hook(module, args, kwargs):
            _, calls[index] = capture.record_call(recorder, module, args, kwargs)

        return hook

    def block_in(index: int):
        def hook(module, args, kwargs):
            x = first_tensor(args, kwargs)
            if index == 0:  # a leaf autograd tracks, so the graph reaches every layer
                x = x.detach().requires_grad_()
                streams[0] = x
                if args and isinstance(args[0], Tensor):
                    return (x, *args[1:]), kwargs
                return args, {**kwargs, "hidden_states": x}
            streams[index] = x
            return None

        return hook

    def watch(module, args, output):
        io[id(module)] = first_tensor((output,))

    blocks = layout_of(loaded).blocks
    device = model_device(loaded.model)
    with loaded.lock:
        handles = []
        try:
            for i, module in enumerate(attention):
                handles.append(module.register_forward_pre_hook(enter(i), with_kwargs=True))
                handles.append(blocks[i].register_forward_pre_hook(block_in(i), with_kwargs=True))
                roles = layout.roles[i]
                for watched in (roles.projection, roles.post and roles.post[0]):
                    if watched is not None:
                        handles.append(watched.register_forward_hook(on_this_thread(watch)))
            with torch.enable_grad(), capture.recording(recorder):
                output = loaded.model(**{k: v.to(device) for k, v in inputs.items()})
                last = output.last_hidden_state[0]
                if callable(metric):
                    metric = metric(last.detach())
                logits = layout_of(loaded).unembed(last[metric.position])
                value = logits[metric.target] - logits[metric.contrast]
                tensors = [t for i in range(len(attention)) for t in recorder.qkv[i]]
                grads = torch.autograd.grad(value, tensors, retain_graph=True)
                through = [None] + [
                    _through_heads(streams[i], recorder.qkv[i], grads[3 * i : 3 * i + 3])
                    for i in range(1, len(attention))
                ]
        finally:
            for handle in handles:
                handle.remove()
    return {
        "metric": metric,
        "value": float(value.detach()),
        "through": through,
        "streams": streams,
        "calls": calls,
        "outs": recorder.outs,
        "io": io,
    }


def _writes(loaded, layout, outs: Tensor, io, layer: int) -> Tensor:
    """Each head's write as the stream adds it: outs (T, H, hd) -> (H, T, d), float64, through
    the layer's post norm with its scale frozen at the corrupted run's (io)."""
    roles = layout.roles[layer]
    writes = split_writes(roles.projection, outs)
    if roles.post is not None:
        a, w = io[id(roles.projection)][0], io[id(roles.post[0])][0]
        writes = roles.post[1].linear(writes, roles.post[1].scale(a.detach(), w.detach()))
    return writes


def _through_heads(x: Tensor, qkv, grads) -> dict[str, Tensor]:
    """The metric's gradient with respect to a layer's input x (1, T, d) through each head's
    q, k and v alone, {p: (heads_p, T, d) float64}, from the pass's own graph: q, k, v and
    their gradients (the metric's), the backward batched over the heads."""
    out = {}
    for name, tensor, grad in zip(INPUTS, qkv, grads, strict=True):
        heads = tensor.shape[1]
        outputs = torch.zeros(heads, *tensor.shape, dtype=tensor.dtype, device=tensor.device)
        index = torch.arange(heads)
        outputs[index, :, index] = grad.detach().transpose(0, 1)
        (g,) = torch.autograd.grad(tensor, x, outputs, retain_graph=True, is_grads_batched=True)
        out[name] = g[:, 0].double()
    return out


def edge_scores(loaded: LoadedModel, clean: str, corrupted: str, metric) -> EdgeScores:
    """Every head-to-head edge's score for `metric` between two texts of the same token count
    (module docstring). metric: a patching.Metric, or choose(clean_last, corrupted_last) -> one
    from the two passes' outputs (T, d) (its default tokens are their top guesses)."""
    layout = trace_layout(loaded)
    if layout.refusal is not None:
        raise TraceRefused(layout.refusal)
    if any(roles.kind != "sum" for roles in layout.roles):
        raise TraceRefused("its blocks renormalise the stream, so a head's write is not an edge")
    clean_inputs, _ = tokenize(loaded, clean, None)
    corrupted_inputs, _ = tokenize(loaded, corrupted, None)
    with torch.inference_mode():
        clean_run = run_stream(loaded, clean_inputs)
    choose = metric if callable(metric) else None
    chosen = (lambda last: choose(clean_run.last_hidden[0], last)) if choose else metric
    run = _graded(loaded, corrupted_inputs, chosen)
    metric = run["metric"]
    with torch.inference_mode():
        logits = layout_of(loaded).unembed(clean_run.last_hidden[0, metric.position])
        clean_value = float(logits[metric.target] - logits[metric.contrast])
    span = clean_value - run["value"]
    n = len(loaded.attention_layers)
    # A write is linear in the heads' outputs (a post norm's scale frozen), so the difference
    # of the writes is the write of the difference: one projection a layer, not two.
    deltas = [
        _writes(
            loaded, layout,
            clean_run.heads[m][0].double() - run["outs"][m][0].detach().double(),
            run["io"], m,
        )
        for m in range(n - 1)
    ]  # (H, T, d) each  # fmt: skip
    upstream = torch.stack(deltas).flatten(2)  # (L - 1, H, T·d)
    heads = upstream.shape[1]
    scores: dict[str, list[Tensor]] = {p: [torch.zeros(0, heads, 0, dtype=torch.float64)]
                                       for p in INPUTS}  # fmt: skip
    for layer in range(1, n):
        # q, k and v's gradients side by side: the earlier writes are read once a layer.
        grads = [run["through"][layer][p].flatten(1) for p in INPUTS]  # (heads_p, T·d) each
        found = upstream[:layer].flatten(0, 1) @ torch.cat(grads).T / span  # (l·H, Σ heads_p)
        for p, part in zip(INPUTS, found.split([g.shape[0] for g in grads], dim=1), strict=True):
            scores[p].append(part.reshape(layer, heads, -1).cpu())
    return EdgeScores(metric, clean_value, run["value"], scores)
