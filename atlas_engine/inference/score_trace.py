"""One attention score taken apart into the pieces of the residual stream that made it.

Layer l's attention reads the residual stream x_l, and x_l is a sum of what wrote into it: the
embeddings (token, and position where the model adds one), every earlier head's output, every
earlier MLP's output, and bias terms (projection biases, norms' betas). With every norm's
per-token scale frozen at its value on the real pass (Transformer Debugger's and
circuit-tracer's convention; a LayerNorm's centring is linear and applies to each piece), the
attention's input h_l = norm(x_l) is a sum of those pieces mapped linearly, and so are the
query q_i and the key k_j of a head: its q/k norm (Qwen 3, Gemma 3, OLMo 2) is frozen the same
way and RoPE is a fixed rotation at each position. So the score s_ij = scale · q_i · k_j is
exactly a sum over (query-side piece, key-side piece) pairs, to float rounding.

What adds the pieces up is found, not named: a probe pass reads each block's roles off which
tensors are equal, as atlas_engine.inference.residual does. A pre-norm block adds its
attention's write and its MLP's to the stream (x_{l+1} = x_l + w_l + m_l); a post-norm block
(BERT, DistilBERT) renormalises it, x_{l+1} = N2(N1(x_l + a_l) + m_l), and with N1 and N2 frozen
every earlier piece is carried through them. Where neither holds the trace is refused, saying
why. Exceptions: a softcap (Gemma 2) is applied after, so the pre-cap score is traced; a
position bias (T5) is a term of its own; sinks (gpt-oss) take a share of the softmax but are
part of no score; under GQA the key is the group's shared key head; a key outside the mask
(causal or a sliding window) has no score to trace.

Shapes: T tokens, d the stream's width, K pieces, P the few positions traced (the query, the
key, the contrast key), hd the head's width.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from atlas_engine.inference.attribution import in_float64
from atlas_engine.inference.forward import tokenize_once
from atlas_engine.inference.replay import layer_weights
from atlas_engine.inference.residual import (
    PROBE_TEXT,
    HeadOutputs,
    block_of,
    first_tensor,
    fit_norm,
    on_this_thread,
    same_tensor,
)
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from attention_core.direct import AffineNorm

FROZEN = (
    "Every norm's per-token scale is frozen at its value on this pass (the attention's input "
    "norm, any q/k norm, and in a post-norm model every norm the stream went through), which "
    "makes the query and the key linear in the stream's pieces; a LayerNorm's centring is "
    "applied to each piece. RoPE is the fixed rotation of each position. The pairs and the "
    "bias terms sum to the real score before any softcap or mask."
)


PARTS_MAX_REL = 2e-5
"""The pairs (and each side's totals) sum to the real score within this fraction of the sum of
their sizes: the pieces are carried in float64 from float32 tensors of the real pass, and the
real score is float32 (tests/atlas_engine/inference/test_score_trace.py holds it)."""


class TraceRefused(Exception):
    """A model or request whose score cannot be taken apart; the message says why."""


@dataclass(frozen=True)
class Piece:
    """One piece of the residual stream: kind "embedding", "head", "mlp" or "bias"."""

    kind: str
    label: str
    layer: int | None = None
    head: int | None = None


Norm = tuple[nn.Module, AffineNorm]


@dataclass(frozen=True)
class BlockRoles:
    """What one block's modules do to the stream (see the module docstring). kind "sum": the
    block adds its attention's write and the rest; "post": N1 and N2 renormalise the stream."""

    kind: str
    norm_in: Norm | None  # between the stream and the attention's input (None: it reads x_l)
    projection: nn.Module  # the heads' outputs -> a_l
    post: Norm | None  # a norm on a_l before the stream adds it (Gemma 2, OLMo 2)
    n1: Norm | None  # post-norm blocks: N1(x_l + a_l)
    n2: Norm | None  # and N2(N1(...) + m_l), the block's output
    inner: tuple[Norm, ...]  # norms inside the attention module (q/k norms), frozen too


@dataclass(frozen=True)
class TraceLayout:
    roles: list[BlockRoles]
    embeddings: list[tuple[str, nn.Module]]  # (label, module) whose outputs sum to x_0
    embedding_norm: Norm | None  # a norm between that sum and x_0 (BERT)
    refusal: str | None
    blocks: list[nn.Module] = field(default_factory=list)  # each attention layer's block


_layouts: weakref.WeakKeyDictionary[nn.Module, TraceLayout] = weakref.WeakKeyDictionary()


def trace_layout(loaded: LoadedModel) -> TraceLayout:
    """The model's roles, probed once and kept while it is loaded."""
    with loaded.lock:
        found = _layouts.get(loaded.model)
        if found is None:
            found = _layouts[loaded.model] = _probe(loaded)
        return found


# --- the probe -------------------------------------------------------------------------------


def _close(a: Tensor | None, b: Tensor | None, rel: float = 1e-5) -> bool:
    if a is None or b is None or a.shape != b.shape:
        return False
    scale = float(b.abs().max().clamp_min(1e-12))
    return float((a.double() - b.double()).abs().max()) <= rel * scale


def _norm_between(modules, io, x: Tensor, y: Tensor, equal=same_tensor) -> Norm | None:
    """The module among `modules` that takes x to y and behaves as an elementwise-affine norm."""
    for module in modules:
        seen = io.get(id(module))
        if seen is None or not equal(seen[0], x) or not same_tensor(seen[1], y):
            continue
        inp = seen[0]
        fitted = fit_norm(module, inp.shape[-1], inp.dtype, inp.device)
        if fitted is not None and _close(_frozen(fitted, inp, y), y, 1e-4):
            return module, fitted
    return None


def _frozen(norm: AffineNorm, x: Tensor, y: Tensor) -> Tensor:
    return norm.apply(x.double(), norm.scale(x, y))


def _probe(loaded: LoadedModel) -> TraceLayout:
    if not loaded.replayable:
        raise TraceRefused("its heads are not replayed, so their queries and keys cannot be")
    model = loaded.model
    parents = {id(c): m for m in model.modules() for c in m.children()}
    attention = loaded.attention_layers
    blocks = [block_of(parents, m) for m in attention]
    if not blocks or any(b is None for b in blocks) or len({id(b) for b in blocks}) < len(blocks):
        return _refused("its attention layers are not one per block of a layer list")
    inside = {id(m) for b in blocks for m in b.modules()}
    outside = [m for m in model.modules() if id(m) not in inside and m is not model]
    io: dict[int, tuple] = {}

    def watch(module, args, kwargs, output):
        io[id(module)] = (first_tensor(args, kwargs), first_tensor((output,)))

    recorder = HeadOutputs({id(m): i for i, m in enumerate(attention)})
    inputs, _ = tokenize_once(loaded, PROBE_TEXT, None)
    device = model_device(model)
    with loaded.lock:
        handles = [
            m.register_forward_hook(on_this_thread(watch), with_kwargs=True)
            for m in [*(m for b in blocks for m in b.modules()), *outside]
        ]
        try:
            with torch.no_grad(), capture.recording(recorder):
                model(**{k: v.to(device) for k, v in inputs.items()})
        finally:
            for handle in handles:
                handle.remove()
    roles = []
    for layer, (block, module) in enumerate(zip(blocks, attention, strict=True)):
        found = _roles(layer, block, module, io, recorder.outs[layer])
        if isinstance(found, str):
            return _refused(found)
        roles.append(found)
    x0 = io[id(blocks[0])][0]
    parts, norm = _embeddings(loaded, outside, io, x0)
    return TraceLayout(
        roles=roles, embeddings=parts, embedding_norm=norm, refusal=None, blocks=blocks
    )


def _refused(why: str) -> TraceLayout:
    return TraceLayout(roles=[], embeddings=[], embedding_norm=None, refusal=why)


def _roles(layer, block, attention, io, out) -> BlockRoles | str:
    """The block's roles, or why its stream cannot be taken apart."""
    x, y = io[id(block)]
    h = io[id(attention)][0]
    inside = [m for m in block.modules() if m is not block]
    norm_in = None
    if not same_tensor(h, x):
        norm_in = _norm_between(inside, io, x, h)
        if norm_in is None:
            return f"layer {layer}'s attention reads its stream through something not a norm"
    flat = out.reshape(*out.shape[:2], -1)
    projections = [
        m for m in inside if same_tensor(io.get(id(m), (None,))[0], flat) and hasattr(m, "weight")
    ]
    if len(projections) != 1:
        return f"layer {layer}'s heads' outputs do not enter one linear map"
    projection = projections[0]
    a = io[id(projection)][1]
    post, write = None, a
    changed = [
        m for m in inside
        if same_tensor(io.get(id(m), (None,))[0], a) and io[id(m)][1] is not None
        and not same_tensor(io[id(m)][1], a)
    ]  # fmt: skip
    if changed:
        post = _norm_between(changed, io, a, io[id(changed[0])][1])
        if post is None:
            return f"layer {layer} changes its attention's output with something not a norm"
        write = io[id(post[0])][1]
    others = [io[id(m)][1] for m in inside if id(m) in io and io[id(m)][1] is not None]
    inner = tuple(_inner_norms(attention, io))
    if any(_close(x + write + other, y) for other in others if other.shape == y.shape):
        return BlockRoles("sum", norm_in, projection, post, None, None, inner)
    if post is None and norm_in is None:
        n2 = next((n for m in inside if (n := _norm_between([m], io, io.get(id(m), (None,))[0],
                                                             y)) is not None), None)  # fmt: skip
        n1 = _norm_between(inside, io, x + a, None, equal=_close) if n2 is not None else None
        n1 = n1 or _post_norm_n1(inside, io, x + a)
        if n1 is not None and n2 is not None:
            return BlockRoles("post", None, projection, None, n1, n2, inner)
    return (
        f"layer {layer} neither adds its attention's output to the residual stream nor "
        "renormalises the sum with a norm Atlas can freeze"
    )


def _post_norm_n1(inside, io, summed: Tensor) -> Norm | None:
    """A post-norm block's first norm: the one whose input is x_l + a_l (to rounding)."""
    for module in inside:
        seen = io.get(id(module))
        if seen is None or not _close(seen[0], summed) or seen[1] is None:
            continue
        fitted = fit_norm(module, summed.shape[-1], summed.dtype, summed.device)
        if fitted is not None and _close(_frozen(fitted, seen[0], seen[1]), seen[1], 1e-4):
            return module, fitted
    return None


def _inner_norms(attention: nn.Module, io) -> list[Norm]:
    """Norms called inside the attention module (q/k norms): modules whose output has their
    input's shape and that behave as elementwise-affine norms on the probe pass."""
    found = []
    for module in attention.modules():
        seen = io.get(id(module))
        if module is attention or seen is None or seen[0] is None or seen[1] is None:
            continue
        x, y = seen
        if x.shape != y.shape or same_tensor(x, y) or isinstance(module, nn.Linear):
            continue
        fitted = fit_norm(module, x.shape[-1], x.dtype, x.device)
        if fitted is not None and _close(_frozen(fitted, x, y), y, 1e-4):
            found.append((module, fitted))
    return found


def _embeddings(loaded, outside, io, x0) -> tuple[list[tuple[str, nn.Module]], Norm | None]:
    """The embedding modules whose outputs sum to x_0 (or to a norm's input whose output is
    x_0), labelled; else x_0 as one piece (an empty list)."""
    token = loaded.model.get_input_embeddings()
    names = {id(m): n for n, m in loaded.model.named_modules()}
    parts = [m for m in outside if isinstance(m, nn.Embedding) and id(m) in io
             and io[id(m)][1] is not None and io[id(m)][1].shape == x0.shape]  # fmt: skip
    if not parts:
        return [], None
    total = sum(io[id(m)][1].double() for m in parts)

    def label(m: nn.Module) -> str:
        name = names.get(id(m), "").rsplit(".", 1)[-1]
        if m is token:
            return "token embedding"
        if "position" in name or name == "wpe":
            return "position embedding"
        if "type" in name:
            return "segment embedding"
        return name.replace("_", " ")

    labelled = [(label(m), m) for m in parts]
    if _close(total, x0):
        return labelled, None
    norm = _norm_between(outside, io, total, x0, equal=_close)
    return (labelled, norm) if norm is not None else ([], None)


# --- a traced pass ---------------------------------------------------------------------------


class _Stop(Exception):
    """Raised once the traced layer's attention function is reached: nothing later is wanted."""


class _TracedHeads(HeadOutputs):
    def __init__(self, layer_of: dict[int, int], last: int) -> None:
        super().__init__(layer_of)
        self.last = last

    def on_call(self, module, q, k, v, mask, kw):
        if self.layer_of.get(id(module)) == self.last:
            raise _Stop
        return super().on_call(module, q, k, v, mask, kw)


@dataclass
class TracedPass:
    """A pass up to layer `layer`'s attention function, with what the trace needs: every
    layer's attention call and input up to it, to replay any of them."""

    input_ids: list[int]
    io: dict[int, tuple]  # id(module) -> (input, output), batch 1
    outs: dict[int, Tensor]  # layer -> heads' outputs (1, T, heads, hd)
    hiddens: dict[int, Tensor]  # layer -> (1, T, d): its attention's input
    calls: dict[int, capture.LayerCall]
    x0: Tensor  # (1, T, d): the first block's input
    layer: int

    @property
    def hidden(self) -> Tensor:
        return self.hiddens[self.layer]

    @property
    def call(self) -> capture.LayerCall:
        return self.calls[self.layer]


def traced_pass(loaded: LoadedModel, layout: TraceLayout, text: str, layer: int) -> TracedPass:
    """Run the model up to layer `layer`'s attention (no gradients, so its tensors may enter
    a replay that keeps a graph), recording the modules the trace reads."""
    attention = loaded.attention_layers
    watched: list[nn.Module] = [m for _, m in layout.embeddings]
    if layout.embedding_norm is not None:
        watched.append(layout.embedding_norm[0])
    blocks = layout.blocks[: layer + 1]
    for m, roles in enumerate(layout.roles[: layer + 1]):
        if m < layer:
            watched.append(blocks[m])
        for norm in (roles.norm_in, roles.post, roles.n1, roles.n2):
            if norm is not None:
                watched.append(norm[0])
        watched.append(roles.projection)
        watched.extend(n for n, _ in roles.inner)
    io: dict[int, tuple] = {}
    hiddens: dict[int, Tensor] = {}
    calls: dict[int, capture.LayerCall] = {}
    kept: dict = {}

    def watch(module, args, kwargs, output):
        io[id(module)] = (first_tensor(args, kwargs), first_tensor((output,)))

    recorder = _TracedHeads({id(m): i for i, m in enumerate(attention)}, layer)

    def enter(index: int):
        def hook(module, args, kwargs):
            hiddens[index], calls[index] = capture.record_call(recorder, module, args, kwargs)

        return hook

    def first(module, args, kwargs):
        kept["x0"] = first_tensor(args, kwargs)

    inputs, _ = tokenize_once(loaded, text, None)
    device = model_device(loaded.model)
    with loaded.lock:
        handles = [m.register_forward_hook(on_this_thread(watch), with_kwargs=True)
                   for m in watched]  # fmt: skip
        for m in range(layer + 1):
            handles.append(attention[m].register_forward_pre_hook(enter(m), with_kwargs=True))
        handles.append(blocks[0].register_forward_pre_hook(first, with_kwargs=True))
        try:
            with torch.no_grad(), capture.recording(recorder), suppress(_Stop):
                loaded.model(**{k: v.to(device) for k, v in inputs.items()})
        finally:
            for handle in handles:
                handle.remove()
    return TracedPass(
        input_ids=inputs["input_ids"][0].tolist(),
        io=io,
        outs=recorder.outs,
        hiddens=hiddens,
        calls=calls,
        x0=kept["x0"],
        layer=layer,
    )


def _scale_of(norm: Norm, io, rows) -> Tensor:
    """The norm's frozen scale at positions `rows`, (P,) float64, from its real input/output."""
    x, y = io[id(norm[0])]
    return norm[1].scale(x[0, rows], y[0, rows])


def frozen_linear(norm: Norm, io, rows, pieces: Tensor) -> Tensor:
    """pieces (K, P, d) at positions `rows` (a list, or slice(None): every position) through
    the norm's linear part, its scale frozen at this pass's (no beta)."""
    return norm[1].linear(pieces, _scale_of(norm, io, rows))


@dataclass
class StreamPieces:
    """The traced layer's attention input at positions `rows`, taken apart: h = Σ pieces.
    pieces: (K, P, d) float64 on the model's device; the last piece is the bias terms."""

    names: list[Piece]
    pieces: Tensor
    max_abs_diff: float  # |Σ pieces - the real input| at those rows


def stream_pieces(
    loaded: LoadedModel, layout: TraceLayout, run: TracedPass, layer: int, rows: list[int]
) -> StreamPieces:
    """The pieces of layer `layer`'s attention input at positions `rows` (see the module
    docstring), carried block by block from the embeddings."""
    io = run.io
    x0 = run.x0[0, rows].double()  # (P, d)
    names: list[Piece] = []
    stack: list[Tensor] = []
    bias = torch.zeros_like(x0)
    if layout.embeddings:
        for label, module in layout.embeddings:
            names.append(Piece("embedding", label))
            stack.append(io[id(module)][1][0, rows].double())
        if layout.embedding_norm is not None:
            norm = layout.embedding_norm
            x, y = io[id(norm[0])]
            s = norm[1].scale(x[0, rows], y[0, rows])
            stack = [norm[1].linear(p, s) for p in stack]
            bias = bias + norm[1].beta.double()
    else:
        names.append(Piece("embedding", "embeddings"))
        stack.append(x0)
    for m in range(layer):
        roles = layout.roles[m]
        x, y = (t[0, rows].double() for t in io[id(layout.blocks[m])])
        out = run.outs[m][0, rows].double()  # (P, heads, hd)
        writes, proj_bias = _head_writes(out, in_float64(roles.projection))  # (heads, P, d)
        if roles.kind == "sum":
            a = io[id(roles.projection)][1][0, rows].double()
            w = a
            if roles.post is not None:
                s = _scale_of(roles.post, io, rows)
                writes = roles.post[1].linear(writes, s)
                proj_bias = roles.post[1].linear(proj_bias, s) + roles.post[1].beta.double()
                w = io[id(roles.post[0])][1][0, rows].double()
            heads = list(writes)
            bias = bias + proj_bias
            mlp = y - x - w
        else:
            (n1, norm1), (n2, norm2) = roles.n1, roles.n2
            s1, s2 = _scale_of(roles.n1, io, rows), _scale_of(roles.n2, io, rows)
            # Every earlier piece, this block's heads and the bias so far, renormalised by
            # N1 then N2 (their scales frozen) in one pass: (K + heads + 1, P, d).
            carried = norm2.linear(
                norm1.linear(torch.cat([torch.stack(stack), writes, (bias + proj_bias)[None]]), s1),
                s2,
            )
            stack, heads = list(carried[: len(stack)]), list(carried[len(stack) : -1])
            z = io[id(n2)][0][0, rows].double()
            n1_out = io[id(n1)][1][0, rows].double()
            bias = (
                carried[-1]
                + norm2.linear(norm1.beta.double().expand_as(bias), s2)
                + norm2.beta.double()
            )
            mlp = norm2.linear(z - n1_out, s2)
        for h, piece in enumerate(heads):
            names.append(Piece("head", f"L{m} H{h}", m, h))
            stack.append(piece)
        names.append(Piece("mlp", f"L{m} MLP", m))
        stack.append(mlp)
    roles = layout.roles[layer]
    if roles.norm_in is not None:
        s = _scale_of(roles.norm_in, io, rows)
        stack = [roles.norm_in[1].linear(p, s) for p in stack]
        bias = roles.norm_in[1].linear(bias, s) + roles.norm_in[1].beta.double()
    names.append(Piece("bias", "bias terms"))
    stack.append(bias.expand_as(x0) if bias.dim() == 1 else bias)
    pieces = torch.stack(stack)
    real = run.hidden[0, rows].double()
    return StreamPieces(names, pieces, float((pieces.sum(0) - real).abs().max()))


def _head_writes(out: Tensor, project) -> tuple[Tensor, Tensor]:
    """Each head's share of the projection at each position: out (P, heads, hd) ->
    ((heads, P, d) with the bias removed, (P, d) the bias project(0))."""
    positions, heads, hd = out.shape
    alone = out.new_zeros(heads + 1, positions, heads, hd)
    index = torch.arange(heads, device=out.device)
    alone[index, :, index] = out.transpose(0, 1)
    projected = project(alone.reshape(heads + 1, positions, heads * hd))
    return projected[:-1] - projected[-1], projected[-1]


# --- the attention module replayed on pieces -------------------------------------------------


@contextmanager
def frozen_inner(loaded: LoadedModel, layout: TraceLayout, run: TracedPass, layer: int):
    """The layer's q/k norms with their scales frozen at this pass's, while the block runs."""
    handles = []

    def freeze(norm: Norm):
        x, y = run.io[id(norm[0])]
        s = norm[1].scale(x, y)  # (1, T, ...)

        def hook(module, args, output):
            inp = args[0]
            return norm[1].apply(inp.double(), s).to(inp.dtype)

        return hook

    with loaded.lock:
        try:
            for norm in layout.roles[layer].inner:
                handles.append(norm[0].register_forward_hook(freeze(norm)))
            yield
        finally:
            for handle in handles:
                handle.remove()


@dataclass(frozen=True)
class ScoreTrace:
    """One score taken apart (see the module docstring); float64 on the host.

    side tensors are (K,), one number per piece (names; the last is the bias terms): query_side
    holds each piece's share through the query (its part of q_i against the whole k_j),
    key_side through the key. Each sums to the score less any position bias. `matrix` holds
    the pairs of the pieces `shown` (indices into names), then "every other piece" and the bias
    terms, (S + 2, S + 2), query side by key side; it sums to the same. The contrast_* fields
    take apart score(key) - score(contrast) the same way (None without a contrast)."""

    names: list[Piece]
    token_ids: list[int]
    query: int
    key: int
    contrast: int | None
    key_head: int  # the key/value head the query head reads (GQA: its group's)
    score: float  # the real pre-softmax score, as the model computed it (before any softcap)
    capped: float | None  # after the softcap, where the model has one
    position_bias: float  # a bias the model adds to this score (T5); 0 where none
    weights: Tensor  # (T,): the head's attention row at the query
    query_side: Tensor
    key_side: Tensor
    shown: list[int]
    matrix: Tensor
    contrast_score: float | None
    contrast_position_bias: float | None  # bias(key) - bias(contrast): no piece's part of it
    contrast_query_side: Tensor | None
    contrast_key_side: Tensor | None
    contrast_matrix: Tensor | None
    stream_max_abs_diff: float  # |Σ pieces - the attention's real input| at the traced rows

    @property
    def parts_sum(self) -> float:
        return float(self.matrix.sum()) + self.position_bias


def default_contrast(weights: Tensor, allowed: Tensor | None, key: int) -> int | None:
    """The key with the highest weight other than `key` (what the softmax weighs it against);
    None where the query may read no other key. weights, allowed: (T,)."""
    order = torch.argsort(weights, descending=True, stable=True).tolist()
    ok = allowed.tolist() if allowed is not None else [True] * len(order)
    return next((j for j in order if j != key and ok[j]), None)


def trace_score(
    loaded: LoadedModel,
    text: str,
    layer: int,
    head: int,
    query: int,
    key: int,
    contrast: int | None = None,
    top: int = 12,
) -> ScoreTrace:
    """Take apart head `head` of layer `layer`'s score at (query, key), and against `contrast`
    (default_contrast where None). TraceRefused where the model's stream cannot be taken apart
    or the key is masked."""
    layout = trace_layout(loaded)
    if layout.refusal is not None:
        raise TraceRefused(layout.refusal)
    run = traced_pass(loaded, layout, text, layer)
    real, _ = capture.capture_batch(run.call, run.hidden)
    allowed = real.allowed()
    row = None if allowed is None else allowed[query]
    if row is not None and not bool(row[key]):
        raise TraceRefused(
            f"query {query} may not read key {key} (the layer's mask: causal, padding or a "
            "sliding window), so there is no score to trace"
        )
    weights = layer_weights(real, [head], allowed)[0, query].double().cpu()
    if contrast is None:
        contrast = default_contrast(weights, row, key)
    elif contrast == key or (row is not None and not bool(row[contrast])):
        raise TraceRefused(f"the contrast key {contrast} must be another key query {query} reads")
    kv = head // real.group
    rows = sorted({query, key} | ({contrast} if contrast is not None else set()))
    at = {p: rows.index(p) for p in rows}
    found = stream_pieces(loaded, layout, run, layer, rows)
    pieces, last = found.pieces, len(found.names) - 1
    scale = real.scale
    score = float((real.q[head] @ real.k[kv].transpose(0, 1))[query, key] * scale)
    bias = 0.0 if real.bias is None else float(real.bias[head, query, key])

    grads = _gradients(loaded, layout, run, layer, head, kv, scale, query, key, contrast)
    hq = pieces[:, at[query]]  # (K, d): every piece at the query
    query_side = hq @ grads["q"]
    key_side = pieces[:, at[key]] @ grads["k"]
    if contrast is not None:
        c_query = hq @ (grads["q"] - grads["qc"])
        c_key = key_side - pieces[:, at[contrast]] @ grads["kc"]
    ranked = [query_side, key_side] + ([c_query, c_key] if contrast is not None else [])
    shown = _top_pieces(ranked, last, top)
    q_rows, k_rows, kc_rows = _replayed_pairs(
        loaded, layout, run, layer, head, kv, pieces, shown, rows, at, query, key, contrast
    )
    matrix = scale * q_rows @ k_rows.T
    # the bias piece's sides: the replay holds the constant terms (a q/k projection's bias)
    query_side[last] = float(matrix[-1].sum())
    key_side[last] = float(matrix[:, -1].sum())
    contrast_fields = (None, None, None, None)
    contrast_bias = None
    if contrast is not None:
        c_matrix = scale * q_rows @ (k_rows - kc_rows).T
        c_query[last] = float(c_matrix[-1].sum())
        c_key[last] = float(c_matrix[:, -1].sum())
        c_score = score - float((real.q[head] @ real.k[kv].transpose(0, 1))[query, contrast]
                                * scale)  # fmt: skip
        if real.bias is not None:
            contrast_bias = bias - float(real.bias[head, query, contrast])
            c_score += contrast_bias
        contrast_bias = contrast_bias or 0.0
        contrast_fields = (c_score, c_query.cpu(), c_key.cpu(), c_matrix.cpu())
    capped = None
    if real.softcap is not None:
        capped = float(torch.tanh(torch.tensor((score + bias) / real.softcap)) * real.softcap)
    return ScoreTrace(
        names=found.names,
        token_ids=run.input_ids,
        query=query,
        key=key,
        contrast=contrast,
        key_head=kv,
        score=score + bias,
        capped=capped,
        position_bias=bias,
        weights=weights,
        query_side=query_side.cpu(),
        key_side=key_side.cpu(),
        shown=shown,
        matrix=matrix.cpu(),
        contrast_score=contrast_fields[0],
        contrast_position_bias=contrast_bias,
        contrast_query_side=contrast_fields[1],
        contrast_key_side=contrast_fields[2],
        contrast_matrix=contrast_fields[3],
        stream_max_abs_diff=found.max_abs_diff,
    )


def _top_pieces(sides: list[Tensor], last: int, top: int) -> list[int]:
    """Up to `top` pieces per side by size, merged in the order they came (bias excluded)."""
    chosen: set[int] = set()
    for side in sides:
        order = torch.argsort(side[:last].abs(), descending=True).tolist()
        chosen.update(order[:top])
    return sorted(chosen)


def _gradients(loaded, layout, run, layer, head, kv, scale, query, key, contrast) -> dict:
    """The score's gradient with respect to the attention's input at the query (through the
    query, the key held) and at the key (through the key), and the same for the contrast key:
    (d,) float64 each. The q/k norms are frozen, so these are the linear maps' transposes."""
    hidden = run.hidden.detach().clone().requires_grad_(True)
    with frozen_inner(loaded, layout, run, layer):
        _, (q, k, _) = capture.capture_batch(run.call, hidden, grad=True)
        qi = q[0, head, query]
        wanted = {"q": (qi, k[0, kv, key].detach(), query), "k": (qi.detach(), k[0, kv, key], key)}
        if contrast is not None:
            wanted["qc"] = (qi, k[0, kv, contrast].detach(), query)
            wanted["kc"] = (qi.detach(), k[0, kv, contrast], contrast)
        out = {}
        for name, (a, b, position) in wanted.items():
            (g,) = torch.autograd.grad(scale * (a @ b), hidden, retain_graph=True)
            out[name] = g[0, position].double()
    return out


def _replayed_pairs(loaded, layout, run, layer, head, kv, pieces, shown, rows, at, query, key,
                    contrast) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The query at `query` and the keys at `key` and `contrast` of each shown piece, of
    "every other piece" and of the bias terms: (S + 2, hd) float64 each (the contrast's zeros
    where None). A piece's share is its replay less the replay of zero (a projection's bias
    is the bias terms'), so the rows sum to the real q and k."""
    last = pieces.shape[0] - 1
    other = [p for p in range(last) if p not in set(shown)]
    stacked = [pieces[shown], pieces[other].sum(0, keepdim=True), pieces[last:],
               torch.zeros_like(pieces[:1])]  # fmt: skip
    chosen = torch.cat(stacked)  # (R, P, d)
    hidden = run.hidden.new_zeros(chosen.shape[0], *run.hidden.shape[1:])
    hidden[:, rows] = chosen.to(hidden.dtype)
    with frozen_inner(loaded, layout, run, layer):
        _, (q, k, _) = capture.capture_batch(run.call, hidden)
    q, k = q[:, head].double(), k[:, kv].double()  # (R, T, hd)
    q = torch.cat([q[:-2] - q[-1:], q[-2:-1]])  # the bias row keeps the constant terms
    k = torch.cat([k[:-2] - k[-1:], k[-2:-1]])
    q_rows, k_rows = q[:, query], k[:, key]
    kc_rows = k[:, contrast] if contrast is not None else torch.zeros_like(k_rows)
    return q_rows, k_rows, kc_rows
