"""What every head does on a text (POST /api/attention/heads), from the cached forward pass."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import ForwardResult, count_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.attention import TextRequest
from atlas_engine.schemas.follow import FollowRequest, FollowResponse
from atlas_engine.schemas.heads import (
    MARKED,
    MARKED_DESCRIPTION,
    MARKED_LABEL,
    READERS_DESCRIPTION,
    ClearestRole,
    HeadRole,
    HeadsRequest,
    HeadsResponse,
    RoleRule,
)
from atlas_engine.schemas.search import (
    FoundHead,
    PairQuery,
    RoleQuery,
    SearchRequest,
    SearchResponse,
)
from atlas_engine.services.checks import indices
from atlas_engine.services.head_statistics import pair_weights, statistics_of, working_bytes
from atlas_engine.services.passes import Passes, ShouldStop
from attention_core.aggregate import follow_token
from attention_core.head_stats import DESCRIPTIONS, LABELS, ROLES, STATISTICS, ClearestHead


@contextmanager
def held_for_statistics(
    passes: Passes,
    loaded: LoadedModel,
    req: TextRequest,
    should_stop: ShouldStop = None,
) -> Iterator[ForwardResult]:
    """The forward pass for an answer that reads every head: with maps kept, held to the
    model's full_map_tokens (as every whole-maps reader); with maps replayed, to the model's
    whole limit, reserving what the block-by-block statistics hold besides the pass."""
    if not loaded.maps_replayed:
        with passes.held(loaded, req, should_stop) as result:
            yield result
        return
    seq = count_tokens(loaded, req.text, req.text_pair)
    working = passes.reserve_bytes("statistics", working_bytes(loaded.arch, seq))
    try:
        with passes.held(loaded, req, should_stop, whole_maps=False) as result:
            yield result
    finally:
        working.release()


def _grid(values: torch.Tensor) -> list[list[float | None]]:
    return [[None if math.isnan(v) else round(v, 6) for v in row] for row in values.tolist()]


def describe_heads(
    passes: Passes,
    req: HeadsRequest,
    should_stop: ShouldStop = None,
) -> HeadsResponse:
    loaded = passes.model(req.model)
    layers = indices(req.layers, loaded.arch.num_layers, "layers")
    heads = loaded.arch.num_heads
    marked = readers = None
    if req.marked is not None or req.read_from is not None:  # checked before any pass runs
        if req.marked is None:
            raise InvalidInput("read_from names the rows that read the marked tokens: mark some")
        seq = count_tokens(loaded, req.text, req.text_pair)
        marked = positions_mask(req.marked, seq, "marked token")
        readers = positions_mask(req.read_from, seq, "read_from row")
    with held_for_statistics(passes, loaded, req, should_stop) as result:
        start = time.perf_counter()
        stats = statistics_of(loaded, result, layers, should_stop, marked, readers)
        seconds = time.perf_counter() - start
    names = [*STATISTICS, *([MARKED] if marked is not None else [])]
    marked_description = (
        {}
        if marked is None
        else {MARKED: MARKED_DESCRIPTION if readers is None else READERS_DESCRIPTION}
    )
    return HeadsResponse(
        model=loaded.id,
        tokens=result.tokens,
        num_layers=loaded.arch.num_layers,
        num_heads=heads,
        layers=layers,
        num_kv_heads=loaded.arch.num_kv_heads,
        causal=loaded.causal,
        statistics={name: _grid(stats.values[name]) for name in names},
        descriptions=DESCRIPTIONS | marked_description,
        labels=LABELS | ({} if marked is None else {MARKED: MARKED_LABEL}),
        roles=[
            [
                [HeadRole(role=role, score=round(score, 6)) for role, score in stats.roles(row, h)]
                for h in range(heads)
            ]
            for row in range(len(layers))
        ],
        rules={role: RoleRule(statistic=s, threshold=t) for role, (s, t) in ROLES.items()},
        clearest=_clearest(stats.clearest(layers)),
        compute_ms=round(seconds * 1000, 3),
    )


def _clearest(found: ClearestHead | None) -> ClearestRole | None:
    if found is None:
        return None
    return ClearestRole(
        layer=found.layer,
        head=found.head,
        role=found.role,
        statistic=found.statistic,
        score=round(found.score, 6),
        threshold=found.threshold,
    )


def positions_mask(positions: list[int] | None, seq: int, what: str) -> torch.Tensor | None:
    """(seq,) bool: the positions asked for, each checked against the text's token count."""
    if positions is None:
        return None
    outside = [p for p in positions if p >= seq]
    if outside:
        raise InvalidInput(f"{what} {outside[0]} out of range: the text has {seq} tokens")
    marked = torch.zeros(seq, dtype=torch.bool)
    marked[positions] = True
    return marked


def follow(
    passes: Passes,
    req: FollowRequest,
    should_stop: ShouldStop = None,
) -> FollowResponse:
    """One token through every layer and head, from the cached forward pass."""
    loaded = passes.model(req.model)
    with passes.held(loaded, req, should_stop) as result:
        if req.token >= result.seq_len:
            raise InvalidInput(
                f"token {req.token} out of range: the text has {result.seq_len} tokens"
            )
        followed = follow_token(result.all_maps(), req.token)
        lists = {
            name: getattr(followed, name).round(decimals=6).tolist()
            for name in ("as_query", "as_key", "query_mean", "query_max", "key_mean", "key_max")
        }
    return FollowResponse(
        model=loaded.id,
        tokens=result.tokens,
        token=req.token,
        num_layers=loaded.arch.num_layers,
        num_heads=loaded.arch.num_heads,
        **lists,
    )


def search_heads(
    passes: Passes,
    req: SearchRequest,
    should_stop: ShouldStop = None,
) -> SearchResponse:
    """Heads found by a weight between two tokens, by role, or ranked by a statistic."""
    loaded = passes.model(req.model)
    query = req.query
    with held_for_statistics(passes, loaded, req, should_stop) as result:
        seq = result.seq_len
        if isinstance(query, PairQuery):
            outside = [i for i in (query.source, query.target) if i >= seq]
            if outside:
                raise InvalidInput(f"token {outside[0]} out of range: the text has {seq} tokens")
            weights = pair_weights(loaded, result, query.source, query.target)  # (L, H)
            found = [
                (float(weights[layer, h]), layer, h)
                for layer, h in (weights > query.above).nonzero().tolist()
            ]
            found.sort(reverse=True)
        else:
            stats = statistics_of(loaded, result, should_stop=should_stop)
            layers, heads = stats.values["entropy"].shape
            if isinstance(query, RoleQuery):
                found = [
                    (score, layer, h)
                    for layer in range(layers)
                    for h in range(heads)
                    for role, score in stats.roles(layer, h)
                    if role == query.role
                ]
                found.sort(reverse=True)
            else:
                values = stats.values[query.statistic]
                found = [
                    (float(values[layer, h]), layer, h)
                    for layer in range(layers)
                    for h in range(heads)
                    if not math.isnan(float(values[layer, h]))
                ]
                found.sort(reverse=query.order == "descending")
    return SearchResponse(
        model=loaded.id,
        tokens=result.tokens,
        query=query,
        matches=len(found),
        heads=[
            FoundHead(layer=layer, head=h, value=round(value, 6))
            for value, layer, h in found[: req.limit]
        ],
    )
