"""One head's queries, keys, values and outputs over a corpus run's tokens, in 2-D (POST
/api/corpus/{run_id}/heads/{layer}/{head}/projection): what HeadVis's projection panel shows.

A seeded sample of the run's texts, sized by a token budget before any pass, is read one text at
a time through the server's passes (`Passes.reserve`: sized, reserved and cached, so a text
opened afterwards in the explorer is already computed). From each pass the head's layer is
replayed (atlas_engine.inference.replay, the path every head view uses; equal to the model's
own maps bit for bit in float32) for the head's vectors:

- q: the query after the model's q norm and RoPE, as its attention function received it;
- k, v: the key and value of the key/value head the query head reads (head // group for GQA);
- o = Σ_j α_ij v_j: the head's slice of the output projection's input, before o_proj.

Queries and keys share one plane: both sets are first moved as AttentionViz does (queries × s,
keys ÷ s, keys slid onto the queries' centroid; attention_core.qkspace.normalise_qk), which
changes no softmax row, then projected together on the two principal axes of the joint, centred
point cloud. In that plane a query near a key means a large q·k (‖q - k‖² = ‖q‖² + ‖k‖² - 2 q·k,
and the normalisation evens out the norms). Values and outputs each get their own plane (their
own centred PCA): they live in another space than q and k.

Shapes: n points (one a token), T a text's tokens, hd the head's width.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.corpus.store import Run, Store
from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.inference.replay import layer_capture, layer_weights, refused
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.projection import (
    Plane,
    ProjectedText,
    ProjectionRequest,
    ProjectionResponse,
)
from atlas_engine.serialize import to_lists
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.corpus import find_run
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.qkspace import check_method
from attention_core import qk_space
from attention_core.qkspace import pca_2d, umap_2d

TEXTS_READ_AT_ONCE = 64
"""Texts fetched from the store at a time while the sample is drawn."""


@dataclass(frozen=True)
class HeadVectors:
    """One head's vectors on one text, float32 on the host."""

    q: Tensor  # (T, hd): after the model's q norm and RoPE
    k: Tensor  # (T, hd): the key head this query head reads
    v: Tensor  # (T, hd_v)
    o: Tensor  # (T, hd_v): Σ_j α_ij v_j, before o_proj
    weights: Tensor  # (T, T): the head's map
    scale: float  # the model's score scale: scores = scale · q kᵀ
    kv_head: int


def head_vectors(loaded: LoadedModel, result: ForwardResult, layer: int, head: int) -> HeadVectors:
    """The head's q, k, v, output and map on a text's pass, replayed from the pass's own call of
    the layer (module docstring)."""
    if not loaded.replayable:
        raise refused(loaded.id, loaded.replay_refusal)
    captured = layer_capture(result.calls, result.hidden_inputs, layer)
    kv = head // captured.group
    with torch.inference_mode():
        weights = layer_weights(captured, [head])[0]  # (T, T)
        v = captured.v[kv]  # (T, hd_v)
        o = weights.to(v.dtype) @ v  # (T, hd_v)
    host = {"device": "cpu", "dtype": torch.float32}
    return HeadVectors(
        q=captured.q[head].to(**host), k=captured.k[kv].to(**host), v=v.to(**host),
        o=o.to(**host), weights=weights.to(**host), scale=captured.scale, kv_head=kv,
    )  # fmt: skip


def sample_texts(
    loaded: LoadedModel, store: Store, run: Run, budget: int, seed: int
) -> list[tuple[int, str, int]]:
    """(idx, text, tokens kept) of the run's finished texts in a seeded order until `budget`
    tokens are taken; the last keeps only its first tokens. Tokenised only: no pass yet."""
    idx, _, _ = store.statistics(run)
    generator = torch.Generator().manual_seed(seed)
    order = [int(idx[i]) for i in torch.randperm(len(idx), generator=generator)]
    chosen, used = [], 0
    for start in range(0, len(order), TEXTS_READ_AT_ONCE):
        batch = order[start : start + TEXTS_READ_AT_ONCE]
        found = store.texts(run, batch)
        for i in batch:
            n = count_tokens(loaded, found[i], None, None)
            take = min(n, budget - used)
            chosen.append((i, found[i], take))
            used += take
            if used >= budget:
                return chosen
    return chosen


def projection_run(store: Store | None, run_id: int, layer: int, head: int) -> Run:
    """The run a projection reads, refused (404, 422) before any model is loaded."""
    run = find_run(store, run_id)
    if run.source != "atlas":
        raise InvalidInput(
            f"corpus run {run_id} was imported from a HeadVis tree, which keeps its sampled "
            "sequences only, not the texts a projection runs the model on"
        )
    if not (0 <= layer < run.layers and 0 <= head < run.heads):
        raise InvalidInput(
            f"layer {layer} head {head} is not in {run.model} ({run.layers} layers × "
            f"{run.heads} heads)"
        )
    return run


def projection_seconds(loaded: LoadedModel, run: Run, req: ProjectionRequest) -> float:
    """The work's estimated seconds, to order it on the heavy lane: the passes of the texts a
    budget of req.tokens takes at the run's text length."""
    texts = math.ceil(req.tokens / run.sequence_tokens)
    return texts * ForwardResult.seconds_for(loaded.arch, run.sequence_tokens)


def _answer_bytes(tokens: int, loaded: LoadedModel, longest: int) -> int:
    """What the projection holds at once besides the passes: four float32 vectors a point and
    their float64 copies in the SVD, the JSON answer (about 200 bytes a point), one text's map."""
    arch = loaded.arch
    width = max(arch.head_dim, 1)
    return tokens * (4 * width * (4 + 8) + 200) + 4 * longest * longest


def _plane(points: Tensor, method: str) -> tuple[Tensor, list[float] | None]:
    """(n, d) -> ((n, 2), each axis's share of the variance or None for UMAP)."""
    if method == "umap":
        return umap_2d(points), None
    coords, explained = pca_2d(points)
    return coords, list(explained)


def head_projection(
    passes: Passes,
    store: Store | None,
    run_id: int,
    layer: int,
    head: int,
    req: ProjectionRequest,
    should_stop: ShouldStop = None,
) -> ProjectionResponse:
    """The head's vectors over a seeded sample of the run's tokens, projected (module
    docstring). Sized before work: the sample is drawn and counted and the answer's bytes
    reserved before the first pass; each pass is reserved as it runs."""
    started = time.perf_counter()
    run = projection_run(store, run_id, layer, head)
    check_method(req.method)
    loaded = passes.model(run.model)
    check_layer_head(loaded, layer, head)
    if not loaded.replayable:
        raise refused(loaded.id, loaded.replay_refusal)
    sample = sample_texts(loaded, store, run, req.tokens, req.seed)
    total = sum(n for _, _, n in sample)
    if req.method == "umap" and total < 4:
        raise InvalidInput(f"UMAP needs at least 4 points, the sample has {total}; use 'pca'")
    longest = max((count_tokens(loaded, t, None, None) for _, t, _ in sample), default=0)
    answer = passes.reserve_bytes("projection", _answer_bytes(total, loaded, longest))
    try:
        parts = _read_texts(passes, loaded, sample, layer, head, should_stop)
    finally:
        answer.release()
    kept = store.max_activations(run, [i for i, _, _ in sample], layer, head)
    activations = dict(zip(kept, to_lists(torch.tensor(list(kept.values()))), strict=True))
    return _answer(run, layer, head, req, sample, parts, activations, started)


def _read_texts(passes, loaded, sample, layer, head, should_stop) -> list:
    parts = []
    for _, text, keep in sample:
        if should_stop is not None and should_stop():
            raise RequestCancelled("the client went away before the projection was done")
        held = passes.reserve(loaded, text, None, should_stop, whole_maps=False)
        try:
            vectors = head_vectors(loaded, held.result, layer, head)
            tokens, special = held.result.tokens[:keep], held.result.special[:keep]
        finally:
            held.release()
        parts.append((vectors, tokens, special, keep))
    return parts


def _row_activation(weights: Tensor, keep: int) -> list[float | None]:
    """(T, T) map -> HeadVis's activation of each of the first `keep` rows: the row's largest
    weight off column 0, None for row 0 (HeadVis leaves row 0 and column 0 out)."""
    rows = weights[1:keep, 1:].amax(-1) if keep > 1 else weights.new_zeros(0)
    return [None, *to_lists(rows)][:keep]


def _answer(run, layer, head, req, sample, parts, activations, started) -> ProjectionResponse:
    q, k, v, o, received, entropy, activation = [], [], [], [], [], [], []
    token, text, position, special = [], [], [], []
    if not parts:
        raise InvalidInput(f"corpus run {run.id} has no finished text to project")
    for index, (vectors, tokens, specials, keep) in enumerate(parts):
        w = vectors.weights  # (T, T)
        q.append(vectors.q[:keep])
        k.append(vectors.k[:keep])
        v.append(vectors.v[:keep])
        o.append(vectors.o[:keep])
        received.append(w.sum(0)[:keep])  # (keep,): each key's column sum
        logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
        entropy.append(-(w * logs).sum(-1)[:keep])  # (keep,)
        activation += _row_activation(w, keep)
        token += tokens
        special += specials
        text += [index] * keep
        position += list(range(keep))
    space = qk_space(torch.cat(q), torch.cat(k), req.method)  # (n, 2) each
    values, value_explained = _plane(torch.cat(v), req.method)
    outputs, output_explained = _plane(torch.cat(o), req.method)
    return ProjectionResponse(
        run=run.id, model=run.model, layer=layer, head=head, kv_head=parts[0][0].kv_head,
        method=req.method,
        texts=[
            ProjectedText(idx=i, text=t, tokens=n, max_activation=activations.get(i))
            for i, t, n in sample
        ],
        token=token, text=text, position=position, special=special,
        received=to_lists(torch.cat(received)), entropy=to_lists(torch.cat(entropy)),
        activation=activation,
        queries=to_lists(space.queries), keys=to_lists(space.keys),
        values=to_lists(values), outputs=to_lists(outputs),
        query_key=Plane(explained=None if space.explained is None else list(space.explained)),
        value_plane=Plane(explained=value_explained),
        output_plane=Plane(explained=output_explained),
        query_scale=space.query_scale,
        seconds=round(time.perf_counter() - started, 3),
    )  # fmt: skip
