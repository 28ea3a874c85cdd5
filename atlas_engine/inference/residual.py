"""The residual stream taken apart, for the logit lens, direct logit attribution and patching,
with no code per architecture.

A model's layers are blocks in one list; block l reads the residual stream x_l and returns
x_{l+1}. In a pre-norm block the attention adds w_l (its output projection's output a_l, or a
norm of it where the family normalises the attention's output first: Gemma 2 and 3, OLMo 2)
and the rest of the block (its MLP) adds m_l = x_{l+1} - x_l - w_l, so the last stream is
x_0 + Σ_l (w_l + m_l). What each block does is found, not named: one short probe pass records
every module's input and output, and the layout is read off which tensors are equal
(`Layout`): the linear map that takes the heads' outputs, a norm on its output, the final norm
between the last block and the model's output. A model where the pieces do not add up (a
post-norm encoder such as BERT, whose blocks renormalise the stream) is refused by name for
direct attribution; the lens needs only the blocks and the final norm.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from atlas_engine.inference.forward import tokenize
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from attention_core.direct import AffineNorm

PROBE_TEXT = "The quick brown fox jumps over the lazy dog because it was"
PROBE_SCALE = 1e3
"""The norm probe's amplitude: a norm's epsilon then moves its scale by ~eps / (2 · 1e6)."""

PatchHeads = Callable[[int, Tensor], Tensor]
"""patch(layer, out (batch, T, heads, head_dim)) -> the heads' outputs the layer uses."""
PatchStream = Callable[[int, Tensor], Tensor]
"""patch(layer, x (batch, T, d)) -> the stream block `layer` hands on."""


@dataclass(frozen=True)
class Layout:
    """Where the residual stream's pieces are, read off a probe pass (see the module docstring).
    blocks[l]: layer l's block; projections[l]: the linear map taking its heads' outputs;
    post_norms[l]: a norm applied to that map's output before the stream adds it, or None;
    final_norm: the module between the last block and the model's output (None: nothing).
    A refusal says, in a sentence, why the lens or direct attribution cannot be read."""

    blocks: list[nn.Module]
    projections: list[nn.Module | None]
    post_norms: list[tuple[nn.Module, AffineNorm] | None]
    final_norm: nn.Module | None
    final_affine: AffineNorm | None
    unembed: nn.Linear | None
    lens_refusal: str | None
    direct_refusal: str | None


_layouts: weakref.WeakKeyDictionary[nn.Module, Layout] = weakref.WeakKeyDictionary()


def layout_of(loaded: LoadedModel) -> Layout:
    """The model's layout, probed once and kept while the model is loaded."""
    with loaded.lock:
        found = _layouts.get(loaded.model)
        if found is None:
            found = _layouts[loaded.model] = _probe(loaded)
        return found


def block_of(parents: dict[int, nn.Module], module: nn.Module) -> nn.Module | None:
    """The outermost ancestor of `module` that is an element of a ModuleList: its layer's
    block (T5's block holds a list of its own sublayers, so the first such ancestor up from
    the attention is only its attention sublayer); parents: id(module) -> its parent, for
    every module of the model."""
    child, found = module, None
    while (parent := parents.get(id(child))) is not None:
        if isinstance(parent, nn.ModuleList):
            found = child
        child = parent
    return found


def on_this_thread(hook: Callable) -> Callable:
    """`hook`, acting only on calls made in the thread that wrapped it: a module's hooks see
    every call of it, and a head replayed on another compute lane may call the same module
    while a probe pass holds its hooks (a replay takes no lock)."""
    owner = threading.get_ident()

    def guarded(*args):
        return hook(*args) if threading.get_ident() == owner else None

    return guarded


def first_tensor(args: tuple, kwargs: dict | None = None) -> Tensor | None:
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, Tensor):
            return value
        if isinstance(value, tuple | list) and value and isinstance(value[0], Tensor):
            return value[0]
    return None


def same_tensor(a: Tensor | None, b: Tensor | None) -> bool:
    return a is not None and b is not None and a.shape == b.shape and torch.equal(a, b)


def fit_norm(module: nn.Module, d: int, dtype: torch.dtype, device) -> AffineNorm | None:
    """Read gamma, beta and whether it centres off a norm module by probing it with ±A·p
    (p alternating ±1: mean 0, root mean square 1, so the norm's scale is 1/A) and A·1 (which
    a centring norm sends to beta, an RMS norm to gamma + beta). None where `module` does not
    behave as an elementwise-affine norm on those probes."""
    if d % 2:
        return None
    p = torch.ones(d, dtype=torch.float64, device=device)
    p[1::2] = -1
    with torch.no_grad():
        try:
            run = [module((s * PROBE_SCALE).to(dtype).view(1, 1, d)).double().view(d)
                   for s in (p, -p, torch.ones_like(p))]  # fmt: skip
        except Exception:  # not a module of one tensor
            return None
    pos, neg, flat = run
    gamma, beta = (pos - neg) / (2 * p), (pos + neg) / 2
    tol = 1e-4 * float(gamma.abs().max().clamp_min(1e-12))
    if (flat - beta).abs().max() <= tol:
        centers = True
    elif (flat - gamma - beta).abs().max() <= tol:
        centers = False
    else:
        return None
    return AffineNorm(gamma.to(dtype), beta.to(dtype), centers)


def _fits(norm: AffineNorm | None, x: Tensor, y: Tensor) -> bool:
    """Whether `norm` reproduces y from x ((T, d) each) with the scale read back."""
    if norm is None:
        return False
    again = norm.apply(x.double(), norm.scale(x, y))
    return bool((again - y.double()).abs().max() <= 1e-4 * float(y.abs().max().clamp_min(1e-12)))


class HeadOutputs(capture.Recorder):
    """Every layer's heads' outputs as the model computes them (its own eager attention),
    optionally changed by `patch`; the attention row and values of one layer on request."""

    def __init__(self, layer_of: dict[int, int], patch: PatchHeads | None = None,
                 weights_of: int | None = None, keep: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.keep = keep
        self.layer_of = layer_of
        self.patch = patch
        self.weights_of = weights_of
        self.outs: dict[int, Tensor] = {}
        self.weights: Tensor | None = None  # (batch, heads, T, T) of layer weights_of
        self.values: Tensor | None = None  # (batch, kv_heads, T, head_dim)

    def on_call(self, module, q, k, v, mask, kw):
        out, weights = super().on_call(module, q, k, v, mask, kw)
        layer = self.layer_of.get(id(module))
        if layer is None:
            return out, weights
        if self.patch is not None:
            out = self.patch(layer, out)
        if self.keep:
            self.outs[layer] = out
        if layer == self.weights_of:
            self.weights, self.values = weights, v
        return out, weights


@dataclass
class Stream:
    """One pass taken apart, every tensor (batch, T, ...) on the model's device in its dtype,
    with the autograd graph where the pass ran with gradients."""

    inputs: list[Tensor]  # x_l (batch, T, d): what block l reads; inputs[0] the embeddings
    outputs: list[Tensor]  # x_{l+1} (batch, T, d): what block l hands on
    heads: list[Tensor]  # (batch, T, heads, head_dim): each layer's heads' outputs
    projected: list[Tensor]  # a_l (batch, T, d): the output projection's output (with bias)
    writes: list[Tensor]  # w_l (batch, T, d): what the stream adds for the attention
    last_hidden: Tensor  # (batch, T, d): the model's output (after its final norm)
    weights: Tensor | None = None  # (batch, heads, T, T): the layer asked for (weights_of)
    values: Tensor | None = None  # (batch, kv_heads, T, head_dim): its values

    def rest(self, layer: int) -> Tensor:
        """m_l: what block `layer` adds besides its attention (its MLP). (batch, T, d)"""
        return self.outputs[layer] - self.inputs[layer] - self.writes[layer]


def _hook_input(store: list, index: int):
    def hook(module, args, kwargs, output):
        store[index] = (first_tensor(args, kwargs), first_tensor((output,)))

    return hook


def run_stream(
    loaded: LoadedModel,
    inputs: dict[str, Tensor],
    *,
    patch_heads: PatchHeads | None = None,
    patch_stream: PatchStream | None = None,
    weights_of: int | None = None,
    grad: bool = False,
    keep: bool = True,
    record: list | None = None,
    replay: Replay | None = None,
) -> Stream:
    """The model over `inputs` (its tokenizer's, any batch), taken apart as Stream says.
    patch_heads / patch_stream change a layer's heads' outputs / a block's output on the way;
    grad: run with autograd (for attribution patching), else under inference_mode;
    keep=False: keep only last_hidden (the other lists are empty), for a pass whose metric
    alone is wanted (exact patching's batches);
    record: a list filled with what each block returned, as it returned it (for `replay`);
    replay: the blocks before replay.start hand on what they returned in a recorded pass
    instead of running (their hooks, patch_stream's included, still see it)."""
    layout = layout_of(loaded)
    n = len(layout.blocks)
    seen: list = [None] * n
    projected: list = [None] * n
    written: list = [None] * n
    layer_of = {id(m): i for i, m in enumerate(loaded.attention_layers)}
    recorder = HeadOutputs(layer_of, patch_heads, weights_of, keep)
    device = model_device(loaded.model)
    context = torch.enable_grad() if grad else torch.inference_mode()
    # Hooks act on the modules, for every pass: they are put on and taken off while this pass
    # holds the model's lock, so no other request's pass runs with them.
    with loaded.lock:
        handles = []
        try:
            for layer, block in enumerate(layout.blocks):
                if patch_stream is not None:
                    handles.append(block.register_forward_hook(_patcher(layer, patch_stream)))
                if not keep:
                    continue
                handles.append(
                    block.register_forward_hook(_hook_input(seen, layer), with_kwargs=True)
                )
                if layout.projections[layer] is not None:
                    handles.append(layout.projections[layer].register_forward_hook(
                        _keep_output(projected, layer)))  # fmt: skip
                if layout.post_norms[layer] is not None:
                    handles.append(layout.post_norms[layer][0].register_forward_hook(
                        _keep_output(written, layer)))  # fmt: skip
            if record is not None:
                record[:] = [None] * n
                for layer, block in enumerate(layout.blocks):
                    handles.append(block.register_forward_hook(_recorder(record, layer)))
            if replay is not None:  # one at a time, so `finally` puts back each one set
                for layer in range(replay.start):
                    handles.append(_Replayed(layout.blocks[layer], replay.returned[layer]))
            if grad:  # the stream from the first block on is then in autograd's graph
                handles.append(
                    layout.blocks[0].register_forward_pre_hook(_tracked, with_kwargs=True)
                )
            with context, capture.recording(recorder):
                output = loaded.model(**{k: v.to(device) for k, v in inputs.items()})
        finally:
            for handle in handles:
                handle.remove()
    if not keep:
        return Stream([], [], [], [], [], output.last_hidden_state)
    for layer in range(n):
        if written[layer] is None:
            written[layer] = projected[layer]
    return Stream(
        inputs=[s[0] for s in seen],
        outputs=[s[1] for s in seen],
        heads=[recorder.outs[i] for i in range(n)],
        projected=projected,
        writes=written,
        last_hidden=output.last_hidden_state,
        weights=recorder.weights,
        values=recorder.values,
    )


@dataclass(frozen=True)
class Replay:
    """For reruns that change only block `start` and later: what every block returned in a
    pass of one sequence (run_stream's `record`). The blocks before `start` hand that on,
    repeated to the rerun's batch, so a rerun skips them; their outputs are the very numbers
    of that pass (a batch of copies computed again can differ from it in the last bits)."""

    start: int
    returned: list


class _Replayed:
    """A block whose forward hands on `returned` (tensors of batch 1 repeated to the batch
    its input has) until remove(): an instance attribute shadows the class's forward, and the
    module's call (its hooks) is unchanged."""

    def __init__(self, block: nn.Module, returned) -> None:
        self.block = block
        self.own = block.__dict__.get("forward")  # a forward set on the instance, kept

        def forward(hidden_states=None, *args, **kwargs):
            x = hidden_states if hidden_states is not None else first_tensor(args, kwargs)
            return _repeated(returned, x.shape[0])

        block.forward = forward

    def remove(self) -> None:
        if self.own is None:
            del self.block.forward
        else:
            self.block.forward = self.own


def _repeated(value, batch: int):
    """`value` (a tensor or a tuple of them, batch first) with each batch-1 tensor repeated to
    `batch` (a contiguous copy: a block may write into its input)."""
    if isinstance(value, Tensor):
        return (
            value.expand(batch, *value.shape[1:]).contiguous() if value.shape[:1] == (1,) else value
        )
    if isinstance(value, tuple):
        return tuple(_repeated(v, batch) for v in value)
    return value


def _recorder(store: list, index: int):
    def hook(module, args, output):
        store[index] = output

    return hook


def _tracked(module, args, kwargs):
    """A block's input made a leaf that autograd tracks (the weights are frozen)."""
    if args and isinstance(args[0], Tensor):
        return (args[0].detach().requires_grad_(), *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": kwargs["hidden_states"].detach().requires_grad_()}


def _keep_output(store: list, index: int):
    def hook(module, args, output):
        store[index] = first_tensor((output,))

    return hook


def _patcher(layer: int, patch: PatchStream):
    def hook(module, args, output):
        if isinstance(output, tuple):
            return (patch(layer, output[0]), *output[1:])
        return patch(layer, output)

    return hook


# --- the probe ------------------------------------------------------------------------------


def _probe(loaded: LoadedModel) -> Layout:
    """Read the layout off one short pass with every block's modules watched."""
    model = loaded.model
    parents = {id(c): m for m in model.modules() for c in m.children()}
    blocks = [block_of(parents, m) for m in loaded.attention_layers]
    if not blocks or any(b is None for b in blocks) or len({id(b) for b in blocks}) < len(blocks):
        why = "its attention layers are not one per block of a layer list"
        return _refused(blocks, why)
    inputs, _ = tokenize(loaded, PROBE_TEXT, None)
    io: dict[int, tuple[Tensor | None, Tensor | None]] = {}

    def watch(module, args, kwargs, output):
        io[id(module)] = (first_tensor(args, kwargs), first_tensor((output,)))

    layer_of = {id(m): i for i, m in enumerate(loaded.attention_layers)}
    recorder = HeadOutputs(layer_of)
    device = model_device(model)
    with loaded.lock:  # the hooks are on only while this pass holds the model
        handles = []
        try:
            for module in [*(m for b in blocks for m in b.modules()), *model.children()]:
                handles.append(
                    module.register_forward_hook(on_this_thread(watch), with_kwargs=True)
                )
            with torch.inference_mode(), capture.recording(recorder):
                output = model(**{k: v.to(device) for k, v in inputs.items()})
        finally:
            for handle in handles:
                handle.remove()
    last = output.last_hidden_state
    xs = [io[id(b)][0] for b in blocks]
    ys = [io[id(b)][1] for b in blocks]
    for layer in range(1, len(blocks)):
        if not same_tensor(xs[layer], ys[layer - 1]):
            return _refused(blocks, f"layer {layer} does not read layer {layer - 1}'s output")
    final_norm = None
    if not same_tensor(ys[-1], last):
        found = [m for m in model.children() if same_tensor(io.get(id(m), (None,))[0], ys[-1])
                 and same_tensor(io[id(m)][1], last)]  # fmt: skip
        if len(found) != 1:
            why = "the last layer's output reaches the model's output through more than one module"
            return _refused(blocks, why)
        final_norm = found[0]
    lens_refusal = None if loaded.predictor is not None else "it has no language-model head"
    direct = _direct_layout(loaded, blocks, recorder.outs, io, xs, ys, final_norm)
    projections, post_norms, final_affine, unembed, direct_refusal = direct
    return Layout(
        blocks=blocks, projections=projections, post_norms=post_norms, final_norm=final_norm,
        final_affine=final_affine, unembed=unembed, lens_refusal=lens_refusal,
        direct_refusal=direct_refusal if lens_refusal is None else lens_refusal,
    )  # fmt: skip


def _refused(blocks, why: str) -> Layout:
    n = len(blocks)
    return Layout(
        blocks=[], projections=[None] * n, post_norms=[None] * n, final_norm=None,
        final_affine=None, unembed=None, lens_refusal=why, direct_refusal=why,
    )  # fmt: skip


def _direct_layout(loaded, blocks, outs, io, xs, ys, final_norm):
    """(projections, post_norms, final affine norm, unembedding, refusal or None)."""
    n = len(blocks)
    projections: list = [None] * n
    post_norms: list = [None] * n
    head = loaded.predictor.get_output_embeddings() if loaded.predictor is not None else None
    if loaded.predicts != "next_token" or not isinstance(head, nn.Linear):
        why = (
            "its language-model head is not one linear map (a masked LM's head transforms and "
            "normalises first), so a piece of the stream has no direct effect on a logit"
        )
        return projections, post_norms, None, None, why
    for layer, block in enumerate(blocks):
        out = outs[layer]
        flat = out.reshape(*out.shape[:2], -1)
        inside = [m for m in block.modules() if m is not block]
        found = [
            m
            for m in inside
            if same_tensor(io.get(id(m), (None,))[0], flat) and hasattr(m, "weight")
        ]
        if len(found) != 1:
            why = f"layer {layer}'s heads' outputs do not enter one linear map"
            return projections, post_norms, None, None, why
        projections[layer] = found[0]
        a = io[id(found[0])][1]
        write = a
        changed = [m for m in inside if same_tensor(io.get(id(m), (None,))[0], a)
                   and not same_tensor(io[id(m)][1], a) and io[id(m)][1] is not None]  # fmt: skip
        if changed:
            norm_module = changed[0]
            fitted = fit_norm(norm_module, a.shape[-1], a.dtype, a.device)
            if not _fits(fitted, a[0], io[id(norm_module)][1][0]):
                name = type(norm_module).__name__
                why = f"layer {layer} changes its attention's output with a {name}, not a norm"
                return projections, post_norms, None, None, why
            post_norms[layer] = (norm_module, fitted)
            write = io[id(norm_module)][1]
        if not _adds_up(xs[layer], ys[layer], write, [io[id(m)][1] for m in inside if id(m) in io]):
            why = (
                f"layer {layer} does not add its attention's output to the residual stream as is "
                "(a post-norm block renormalises the stream), so no head has a direct effect"
            )
            return projections, post_norms, None, None, why
    final_affine = None
    if final_norm is not None:
        x, y = ys[-1][0], io[id(final_norm)][1][0]
        final_affine = fit_norm(final_norm, x.shape[-1], x.dtype, x.device)
        if not _fits(final_affine, x, y):
            why = f"its final {type(final_norm).__name__} is not a norm Atlas can freeze"
            return projections, post_norms, None, None, why
    return projections, post_norms, final_affine, head, None


def _adds_up(x: Tensor, y: Tensor, write: Tensor, others: list) -> bool:
    """Whether y == x + write + (some module's output) in the block: the attention's write
    reaches the stream as is, beside the rest of the block's."""
    base = x + write
    scale = float(y.abs().max().clamp_min(1e-12))
    for other in others:
        fits = other is not None and other.shape == y.shape
        if fits and float((base + other - y).abs().max()) <= 1e-5 * scale:
            return True
    return False
