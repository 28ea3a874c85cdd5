"""Heads summed up: per-layer averages, attention rollout and head similarity, from the cached
forward pass (POST /api/attention/aggregate and /similarity)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.inference.inflight import Reservation
from atlas_engine.schemas.aggregate import AggregateRequest, SimilarityRequest, SimilarityResponse
from atlas_engine.serialize import MapsAnswer, held_while_sending
from atlas_engine.services.attention import maps_meta
from atlas_engine.services.checks import check_answer_size, indices
from atlas_engine.services.passes import Passes, ShouldStop
from attention_core.aggregate import cluster_order, head_similarity, rollout_steps

SIMILARITY_ROWS = 64  # query rows compared per head (evenly spaced); exact up to 64 tokens
SIMILARITY_BINS = 64  # key bins per row


class _Rollout:
    """Rollout maps for layers asked in any order, holding one (seq, seq) product at a time:
    walks forward from the last layer reached, and starts again from layer 0 only when a
    layer before it is asked (the default, ascending order, never does)."""

    def __init__(self, result: ForwardResult, residual: float) -> None:
        self.result = result
        self.residual = residual
        self._restart()

    def _restart(self) -> None:
        self._steps: Iterator[torch.Tensor] = rollout_steps(
            self.result.each_layer(), residual=self.residual
        )
        self._reached, self._current = -1, None

    def at(self, layer: int) -> torch.Tensor:
        """(1, seq, seq) float32: the rollout after `layer`."""
        if layer < self._reached:
            self._restart()
        while self._reached < layer:
            self._current = next(self._steps)
            self._reached += 1
        return self._current.to(torch.float32).unsqueeze(0)


def aggregate_maps(
    passes: Passes,
    req: AggregateRequest,
    max_answer_bytes: int,
    should_stop: ShouldStop = None,
) -> tuple[MapsAnswer, Reservation]:
    """One map per requested layer (the head average or the rollout), framed like the maps
    of POST /api/attention with a single 'head'; sized before any work."""
    loaded = passes.model(req.model)
    layers = indices(req.layers, loaded.arch.num_layers, "layers")
    seq = count_tokens(loaded, req.text, req.text_pair)
    check_answer_size(req.format, len(layers), 1, seq, max_answer_bytes)
    held = passes.reserve(
        loaded,
        req.text,
        req.text_pair,
        should_stop,
        # the pieces it is sending, for as long as its reader takes them
        answer_bytes=held_while_sending(req.format, len(layers) * seq * seq, seq),
    )
    result = held.result
    if req.kind == "average":

        def layer_maps(i: int) -> torch.Tensor:
            return result.layer_maps(layers[i]).mean(dim=0, keepdim=True)

    else:
        rollout = _Rollout(result, req.residual)

        def layer_maps(i: int) -> torch.Tensor:
            return rollout.at(layers[i])

    meta = {
        **maps_meta(loaded, result, held.cached, layers, []),
        "kind": req.kind,
        "residual": req.residual if req.kind == "rollout" else None,
    }
    return MapsAnswer(meta, req.format, (len(layers), 1, seq, seq), layer_maps), held.reservation


def similarity(
    passes: Passes,
    req: SimilarityRequest,
    should_stop: ShouldStop = None,
) -> SimilarityResponse:
    """How alike every two heads are on this text, and an order that groups alike heads."""
    loaded = passes.model(req.model)
    with passes.held(loaded, req, should_stop) as result:
        start = time.perf_counter()
        matrix = head_similarity(result.all_maps(), SIMILARITY_ROWS, SIMILARITY_BINS)
        order = cluster_order(matrix)
        seconds = time.perf_counter() - start
        seq = result.seq_len
    return SimilarityResponse(
        model=loaded.id,
        tokens=result.tokens,
        num_layers=loaded.arch.num_layers,
        num_heads=loaded.arch.num_heads,
        num_kv_heads=loaded.arch.num_kv_heads,
        measure="1 - Jensen-Shannon divergence (bits) between the two heads' rows, averaged "
        "over the query rows compared",
        exact=seq <= min(SIMILARITY_ROWS, SIMILARITY_BINS),
        rows_compared=min(seq, SIMILARITY_ROWS),
        key_bins=min(seq, SIMILARITY_BINS),
        similarity=matrix.round(decimals=4).tolist(),
        order=order,
        compute_ms=round(seconds * 1000, 3),
    )
