"""Each head's W_Q, W_K, W_V and W_O read off the model by replaying its layers on basis
vectors, with no code per architecture, and the composition scores of every pair of heads
(attention_core.composition) computed once per model.

The layers' calls are recorded on a one-token text (score_trace.traced_pass), and each layer's
attention is replayed with the rows of the identity as its hidden states, plus one row of
zeros whose q, k and v (the projections' biases) are subtracted. A replayed position is the
first, where RoPE's rotation is the identity: the maps are the un-rotated linear ones, and the
composition read off them ignores RoPE, as is usual. W_O is the output projection (in float64)
on the identity of the heads' concatenated outputs, less its bias.

Folded norms: with `fold_norm` (the default), each basis vector first goes through the layer's
input norm with its per-token scale set to 1 (AffineNorm.linear: a LayerNorm's centring and the
gain gamma; beta is a bias and left out), so W_Q, W_K and W_V read the residual stream itself
(TransformerLens's folded LayerNorm). q/k norms inside the attention (Qwen 3, Gemma 3, OLMo 2)
scale each token by a number of its own; during the replay their scale is frozen to 1 (forward
hooks, under the model's lock), so only their gain is kept. A post-norm model (BERT, MiniLM) has
no norm before its attention; the norms between its blocks are ignored.

Shapes: L layers, H query heads, KV key/value heads (H / KV = group under GQA), d the stream's
width, hd a query/key head's width, hdv a value head's.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.inference.attribution import in_float64
from atlas_engine.inference.residual import on_this_thread
from atlas_engine.inference.score_trace import (
    BlockRoles,
    TraceRefused,
    trace_layout,
    traced_pass,
)
from atlas_engine.models import capture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device
from attention_core.composition import Composition, composition_scores, random_baseline

ONE_TOKEN = "a"
"""The text each layer's call is recorded on; only the replay's first position is read."""

CONVENTION = (
    "Weights only (Elhage et al. 2021): a head reads the stream x and writes W_OV x, "
    "W_OV = W_O W_V; its scores are x_q^T W_QK x_k, W_QK = W_Q^T W_K. Q-comp = "
    "‖W_QK^B^T W_OV^A‖ / (‖W_QK^B‖ ‖W_OV^A‖) (A's write in B's queries), K-comp = "
    "‖W_QK^B W_OV^A‖ / (...) (in its keys), V-comp = ‖W_OV^B W_OV^A‖ / (‖W_OV^B‖ ‖W_OV^A‖). "
    "Each layer's input norm is folded in with its scale set to 1 (its centring and gain), q/k "
    "norms keep their gain only, biases and RoPE's rotation are left out, and in a post-norm "
    "model the norms between blocks are ignored. Under GQA a head's keys and values are its "
    "group's. The baseline is the mean score of Gaussian random heads of the same shapes "
    "(32 pairs, seed 0)."
)


@dataclass(frozen=True)
class HeadWeights:
    """Every head's maps, float64 on the host: w_q (L, H, hd, d), w_k (L, KV, hd, d), w_v
    (L, KV, hdv, d), w_o (L, H, d, hdv); the biases b_q (L, H, hd), b_k (L, KV, hd), b_v
    (L, KV, hdv) (each projection's output on a zero input) and b_o (L, d)."""

    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    w_o: Tensor
    b_q: Tensor
    b_k: Tensor
    b_v: Tensor
    b_o: Tensor
    folded: bool

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 without GQA)."""
        return self.w_q.shape[1] // self.w_k.shape[1]


@contextmanager
def _unit_inner_norms(loaded: LoadedModel, roles: BlockRoles):
    """The layer's q/k norms with their per-token scale set to 1 while the block runs (their
    gain, and a LayerNorm's centring, kept): the replay is then linear in its input."""
    one = torch.ones((), dtype=torch.float64)

    def hook(norm):
        def frozen(module, args, output):
            del module, output  # the norm's own output is replaced
            x = args[0]
            return norm.apply(x.double(), one.to(x.device)).to(x.dtype)

        return on_this_thread(frozen)

    with loaded.lock:
        handles = []
        try:
            for module, norm in roles.inner:
                handles.append(module.register_forward_hook(hook(norm)))
            yield
        finally:
            for handle in handles:
                handle.remove()


def _projection(roles: BlockRoles, width: int, device) -> tuple[Tensor, Tensor]:
    """(W (width, d): row c is the projection of the c-th basis vector less its bias, bias
    (d,)), float64 on the host; width = heads · hdv."""
    project = in_float64(roles.projection)
    rows = torch.cat([torch.eye(width, dtype=torch.float64), torch.zeros(1, width,
                      dtype=torch.float64)]).to(device)  # fmt: skip
    out = project(rows).cpu()  # (width + 1, d)
    return out[:-1] - out[-1], out[-1]


@torch.no_grad()
def head_weights(
    loaded: LoadedModel, fold_norm: bool = True, progress: Callable[[float], None] | None = None
) -> HeadWeights:
    """Every head's maps (see the module docstring); TraceRefused where the model's layers
    cannot be laid out (trace_layout's refusal). `progress(fraction)` after each layer."""
    layout = trace_layout(loaded)
    if layout.refusal is not None:
        raise TraceRefused(layout.refusal)
    layers = len(layout.roles)
    run = traced_pass(loaded, layout, ONE_TOKEN, layers - 1)
    device = model_device(loaded.model)
    found: dict[str, list[Tensor]] = {k: [] for k in ("wq", "wk", "wv", "wo", "bq", "bk", "bv",
                                                       "bo")}  # fmt: skip
    for layer, roles in enumerate(layout.roles):
        hidden = run.hiddens[layer]  # (1, T, d)
        d, seq = hidden.shape[-1], hidden.shape[1]
        basis = torch.eye(d, dtype=torch.float64)
        if fold_norm and roles.norm_in is not None:
            norm = roles.norm_in[1]
            basis = norm.linear(basis.to(norm.gamma.device), torch.ones((), dtype=torch.float64,
                                device=norm.gamma.device)).cpu()  # fmt: skip
        rows = torch.zeros(d + 1, seq, d, dtype=torch.float64)  # (d + 1, T, d): the last zero
        rows[:d] = basis[:, None, :]  # every position holds the row's vector; the first is read
        with _unit_inner_norms(loaded, roles):
            _, (q, k, v) = capture.capture_batch(run.calls[layer], rows.to(device, hidden.dtype))
        for name, t in (("q", q), ("k", k), ("v", v)):
            first = t[:, :, 0].double().cpu()  # (d + 1, heads, hd): position 0
            found["w" + name].append((first[:d] - first[d]).permute(1, 2, 0))  # (heads, hd, d)
            found["b" + name].append(first[d])
        heads, hdv = q.shape[1], v.shape[-1]
        w, bias = _projection(roles, heads * hdv, device)  # (heads · hdv, d), (d,)
        found["wo"].append(w.reshape(heads, hdv, d).transpose(1, 2))  # (heads, d, hdv)
        found["bo"].append(bias)
        if progress is not None:
            progress((layer + 1) / layers)
    stacked = {name: torch.stack(parts) for name, parts in found.items()}
    return HeadWeights(
        w_q=stacked["wq"], w_k=stacked["wk"], w_v=stacked["wv"], w_o=stacked["wo"],
        b_q=stacked["bq"], b_k=stacked["bk"], b_v=stacked["bv"], b_o=stacked["bo"],
        folded=fold_norm,
    )  # fmt: skip


@dataclass(frozen=True)
class ModelComposition:
    """Every pair's composition scores of one model (attention_core.composition.Composition:
    (L, H, L, H) float32 a kind, NaN unless the first head's layer is earlier), each kind's
    random baseline, and the seconds the weights and the scores took."""

    composition: Composition
    baseline: dict[str, float]
    group: int
    weights_seconds: float
    scores_seconds: float


_compositions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_computing = threading.Lock()
_progress: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (stage, fraction)

STAGES = (
    # (what a progress line says, the stage's share of the work: measured on SmolLM2, whose
    # weights take about a fifth of the time, the scores most of it, the baseline the rest)
    ("reading every head's weights", 0.2),
    ("scoring every pair of heads", 0.7),
    ("scoring random heads for the baseline", 0.1),
)


def model_composition(loaded: LoadedModel) -> ModelComposition:
    """The model's composition scores, computed once and kept while it is loaded."""
    with _computing:
        found = _compositions.get(loaded.model)
        if found is None:
            try:
                found = _compositions[loaded.model] = _compose(loaded)
            finally:
                _progress.pop(loaded.model, None)
        return found


def cached_composition(loaded: LoadedModel) -> ModelComposition | None:
    """The model's composition scores where already computed, else None (nothing is run)."""
    return _compositions.get(loaded.model)


def composition_progress(loaded: LoadedModel) -> tuple[str, float] | None:
    """(what is being done, the fraction of the work done) while the model's scores are being
    computed, else None."""
    return _progress.get(loaded.model)


def _reporter(loaded: LoadedModel, stage: int) -> Callable[[float], None]:
    """progress(fraction of stage `stage`) -> the whole computation's (stage, fraction)."""
    done = sum(share for _, share in STAGES[:stage])
    name, share = STAGES[stage]

    def report(fraction: float) -> None:
        _progress[loaded.model] = (name, done + share * fraction)

    report(0.0)
    return report


def _compose(loaded: LoadedModel) -> ModelComposition:
    start = time.perf_counter()
    weights = head_weights(loaded, progress=_reporter(loaded, 0))
    middle = time.perf_counter()
    composition = composition_scores(
        weights.w_q, weights.w_k, weights.w_v, weights.w_o, progress=_reporter(loaded, 1)
    )
    d, hd, hdv = weights.w_q.shape[-1], weights.w_q.shape[-2], weights.w_v.shape[-2]
    _reporter(loaded, 2)
    baseline = random_baseline(d, hd, hdv)
    return ModelComposition(
        composition=composition,
        baseline=baseline,
        group=weights.group,
        weights_seconds=middle - start,
        scores_seconds=time.perf_counter() - middle,
    )
