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
one backward pass of the corrupted text, carried back to the layer's input through that head
alone (_through_heads). Under GQA a key/value head is one input its group shares. Decoders
with a language-model head whose blocks add to the stream.

Cost: one forward pass of the two texts as a batch of two (at a sentence's length little
more than one text's: the weights are read once), its backward from the metric to every
q, k and v, each layer's split of that gradient by head (a head's rows of the q, k and v
projections, the input norm's gradient), and a product of each layer's gradients with every
earlier head's write (docs/performance.md).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.head_inputs import split_writes
from atlas_engine.inference.residual import (
    HeadOutputs,
    first_tensor,
    layout_of,
    on_this_thread,
)
from atlas_engine.inference.score_trace import Norm, TraceRefused, trace_layout
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from attention_core.direct import AffineNorm

INPUTS = ("q", "k", "v")
_known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""model -> layer -> what _through_heads found of it, on the model's first edge patching."""


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


@dataclass
class _Reads:
    """One attention layer's input n (1, T, d) and the linear maps that read it (q/k/v
    projections, fused or not): [(module, output (1, T, out))], all in autograd's graph."""

    n: Tensor
    maps: list[tuple[nn.Module, Tensor]] = field(default_factory=list)


def _linear_maps(module: nn.Module) -> list[nn.Module]:
    """The linear maps inside an attention module (nn.Linear, GPT-2's Conv1D)."""
    return [m for m in module.modules() if isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"]


def _graded(loaded: LoadedModel, inputs: dict[str, Tensor], metric, row: int = 0) -> dict:
    """A pass with autograd over a batch whose row `row` is the corrupted text (edge_scores
    puts the clean text beside it, row 0, so the weights are read once for both): the metric
    at that row (a Metric, or a function of the pass's output (batch, T, d) that chooses it),
    its gradient at every layer's q, k and v, every layer's input x_l, attention call, heads'
    outputs and the modules' outputs the writes need (projection and any post norm), every
    row's."""
    layout = trace_layout(loaded)
    attention = loaded.attention_layers
    recorder = _Keeping({id(m): i for i, m in enumerate(attention)})
    calls, streams, io = {}, {}, {}
    reads: dict[int, _Reads] = {}

    def enter(index: int):
        def hook(module, args, kwargs):
            reads[index] = _Reads(first_tensor(args, kwargs))
            _, calls[index] = capture.record_call(recorder, module, args, kwargs)

        return hook

    def read(index: int):
        def hook(module, args, output):
            if args and args[0] is reads[index].n:  # a map of the layer's input: q, k or v's
                reads[index].maps.append((module, output))

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
                handles += [m.register_forward_hook(read(i)) for m in _linear_maps(module)]
                handles.append(blocks[i].register_forward_pre_hook(block_in(i), with_kwargs=True))
                roles = layout.roles[i]
                for watched in (roles.projection, roles.post and roles.post[0]):
                    if watched is not None:
                        handles.append(watched.register_forward_hook(on_this_thread(watch)))
            with torch.enable_grad(), capture.recording(recorder):
                output = loaded.model(**{k: v.to(device) for k, v in inputs.items()})
                last = output.last_hidden_state[row]
                if callable(metric):
                    metric = metric(output.last_hidden_state.detach())
                logits = layout_of(loaded).unembed(last[metric.position])
                value = logits[metric.target] - logits[metric.contrast]
                tensors = [t for i in range(len(attention)) for t in recorder.qkv[i]]
                grads = torch.autograd.grad(value, tensors, retain_graph=True)
                known = _known.setdefault(loaded.model, {})
                through = [None] + [
                    _through_heads(
                        streams[i], reads[i], layout.roles[i].norm_in, recorder.qkv[i],
                        grads[3 * i : 3 * i + 3], known.setdefault(i, {}), row,
                    )
                    for i in range(1, len(attention))
                ]  # fmt: skip
        finally:
            for handle in handles:
                handle.remove()
    return {
        "metric": metric,
        "value": float(value.detach()),
        "last": output.last_hidden_state.detach(),
        "through": through,
        "streams": streams,
        "calls": calls,
        "outs": recorder.outs,
        "io": io,
    }


def _writes(loaded, layout, outs: Tensor, io, layer: int, row: int = 0) -> Tensor:
    """Each head's write as the stream adds it: outs (T, H, hd) -> (H, T, d), float64, through
    the layer's post norm with its scale frozen at the corrupted run's (io's row `row`)."""
    roles = layout.roles[layer]
    writes = split_writes(roles.projection, outs)
    if roles.post is not None:
        a, w = io[id(roles.projection)][row], io[id(roles.post[0])][row]
        writes = roles.post[1].linear(writes, roles.post[1].scale(a.detach(), w.detach()))
    return writes


def _through_heads(
    x: Tensor, reads: _Reads, norm: Norm | None, qkv, grads, known: dict, row: int = 0
) -> dict[str, Tensor]:
    """The metric's gradient with respect to a layer's input x (batch, T, d), at batch row
    `row`, through each head's q, k and v alone, {p: (heads_p, T, d) float64}, from the pass's
    own graph: q, k, v and their gradients (the metric's). `known` keeps what _split_columns
    found of the layer.

    Autograd can do it whole, batched over the heads, but then multiplies every head's
    cotangent by all of a q projection where only the head's own rows can be non-zero, in
    many small steps a head. So where a layer allows it, it is split at the linear maps that
    read the attention's input n: one backward of q, k and v at once to the maps' outputs P
    (RoPE and per-head norms keep a head's cotangent in its own columns of P: _split_columns
    finds them), each head's columns multiplied by its rows of W alone, and then the input
    norm's exact gradient (AffineNorm.backward, its scale read from x and n) for every head at
    once. A layer whose heads share a column of P (a q norm over the whole projection, OLMo
    2's), whose maps are not seen, or whose n is not an affine norm of x, is done whole.
    tests/atlas_engine/inference/test_edges.py holds both equal on every family."""
    if "columns" not in known:
        known["columns"] = _split_columns(qkv, [output for _, output in reads.maps])
    at_n = _split_to_n(qkv, grads, reads, known["columns"], row) if known["columns"] else None
    if at_n is not None and reads.n is not x:
        n = reads.n[row].detach()
        at_n = _through_norm(norm[1], x[row].detach(), n, at_n, known) if norm else None
    if at_n is None:  # the whole backward, batched over the heads
        out = {}
        for name, tensor, grad in zip(INPUTS, qkv, grads, strict=True):
            (g,) = torch.autograd.grad(tensor, x, _per_head(tensor, grad), retain_graph=True,
                                       is_grads_batched=True)  # fmt: skip
            out[name] = g[:, row].double()
        return out
    counts = [tensor.shape[1] for tensor in qkv]
    return dict(zip(INPUTS, at_n.double().split(counts), strict=True))


def _per_head(tensor: Tensor, grad: Tensor) -> Tensor:
    """Each head's own part of `grad` (the metric's gradient at q, k or v (1, heads, T, hd)):
    (heads, 1, heads, T, hd), zero outside its head."""
    heads = tensor.shape[1]
    cotangent = torch.zeros(heads, *tensor.shape, dtype=tensor.dtype, device=tensor.device)
    index = torch.arange(heads, device=tensor.device)
    cotangent[index, :, index] = grad.detach().transpose(0, 1)
    return cotangent


def _split_columns(qkv, outputs_of: list[Tensor]) -> list | bool:
    """Which columns of each map's output P each head of q, k and v reads: per map, [(heads_p,
    c) column indices or None] for q, k, v; or False where two heads (of any input) share a
    column or an input's heads read unequal counts. Found once a layer from a backward of
    random cotangents (a structural zero is zero whatever the values)."""
    if not outputs_of:
        return False
    per_map: list[list] = [[] for _ in outputs_of]
    generator = torch.Generator(device=qkv[0].device).manual_seed(0)  # not the global one's
    for tensor in qkv:
        random = torch.randn(
            tensor.shape, generator=generator, dtype=tensor.dtype, device=tensor.device
        )
        found = torch.autograd.grad(tensor, outputs_of, _per_head(tensor, random),
                                    retain_graph=True, is_grads_batched=True,
                                    allow_unused=True)  # fmt: skip
        for j, g in enumerate(found):
            used = None if g is None else (g != 0).flatten(1, -2).any(1)  # (heads, out)
            per_map[j].append(used if used is not None and bool(used.any()) else None)
    out = []
    for found in per_map:
        kept = [used for used in found if used is not None]
        if kept and bool((torch.cat(kept).sum(0) > 1).any()):
            return False  # a column read by two heads
        columns = []
        for used in found:
            if used is None:
                columns.append(None)
                continue
            counts = used.sum(1)
            if int(counts.min()) != int(counts.max()):
                return False
            columns.append(_as_block(used.nonzero()[:, 1].view(used.shape[0], -1)))
        out.append(columns)
    return out if any(c is not None for found in out for c in found) else False


def _as_block(columns: Tensor) -> Tensor | tuple[int, int, int]:
    """(heads, c) column indices -> (first, heads, c) where they are one run first + 0 ..
    heads · c - 1, head after head (q_proj's layout: the weights are then a view, not a
    copy); else the indices as they are."""
    heads, c = columns.shape
    first = int(columns[0, 0])
    run = torch.arange(first, first + heads * c, device=columns.device).view(heads, c)
    return (first, heads, c) if torch.equal(columns, run) else columns


def _split_to_n(qkv, grads, reads: _Reads, columns: list, row: int) -> Tensor | None:
    """Each head's gradient at the attention's input n through its own columns of the maps,
    q's heads then k's then v's: (Σ heads_p, T, d), or None where the backward reaches a map
    where _split_columns found no head."""
    outputs_of = [output for _, output in reads.maps]
    found = torch.autograd.grad(list(qkv), outputs_of, [g.detach() for g in grads],
                                retain_graph=True, allow_unused=True)  # fmt: skip
    parts: list[Tensor | None] = [None] * len(INPUTS)
    for (module, _), g, per_input in zip(reads.maps, found, columns, strict=True):
        if g is None:
            continue
        if all(cols is None for cols in per_input):
            return None
        weight = module.weight.detach()
        weight = weight if isinstance(module, nn.Linear) else weight.T  # (out, in); Conv1D: in, out
        g = g[row].to(weight.dtype)  # (T, out)
        for p, cols in enumerate(per_input):
            if cols is None:
                continue
            if isinstance(cols, tuple):  # one run of columns, head after head
                first, heads, c = cols
                rows = weight[first : first + heads * c].view(heads, c, -1)  # (heads_p, c, in)
                picked = g[:, first : first + heads * c].view(-1, heads, c).transpose(0, 1)
            else:
                rows, picked = weight[cols], g[:, cols].transpose(0, 1)
            part = torch.bmm(picked, rows)  # (heads_p, T, in)
            parts[p] = part if parts[p] is None else parts[p] + part
    if any(part is None for part in parts):
        return None
    return torch.cat(parts)


def _through_norm(norm: AffineNorm, x: Tensor, n: Tensor, g: Tensor, known: dict) -> Tensor | None:
    """g (heads, T, d) at the norm's output n (T, d) -> at its input x (T, d), the exact
    gradient with the scale read back from x and n, in the pass's precision; None where n is
    not the norm of x (on the layer's first edge patching, its fit off by more than float32
    rounding: then the layer is always done whole)."""
    s = norm.scale(x, n)  # (T,) float64
    if "norm fits" not in known:
        fitted = norm.apply(x.double(), s)
        off = float((fitted - n.double()).abs().max())
        known["norm fits"] = off <= 1e-4 * max(float(n.abs().max()), 1.0)
    if not known["norm fits"]:
        return None
    return norm.backward(x, s.to(x.dtype), g.to(x.dtype))


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
    if clean_inputs["input_ids"].shape != corrupted_inputs["input_ids"].shape:
        raise ValueError("the clean and corrupted texts must have the same token count")
    # One batch of the two texts (row 0 clean, row 1 corrupted): at a sentence's length a pass
    # is mostly the reading of the weights, which the two rows then share; rows never mix.
    both = {name: torch.cat([clean_inputs[name], corrupted_inputs[name]])
            for name in corrupted_inputs}  # fmt: skip
    chosen = (lambda last: metric(last[0], last[1])) if callable(metric) else metric
    run = _graded(loaded, both, chosen, row=1)
    metric = run["metric"]
    with torch.inference_mode():
        logits = layout_of(loaded).unembed(run["last"][0, metric.position])
        clean_value = float(logits[metric.target] - logits[metric.contrast])
    span = clean_value - run["value"]
    n = len(loaded.attention_layers)
    # A write is linear in the heads' outputs (a post norm's scale frozen), so the difference
    # of the writes is the write of the difference: one projection a layer, not two.
    deltas = [
        _writes(
            loaded, layout,
            run["outs"][m][0].detach().double() - run["outs"][m][1].detach().double(),
            run["io"], m, row=1,
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
