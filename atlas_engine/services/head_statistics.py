"""Every head's statistics on a forward pass (attention_core.head_stats), from the maps it
kept or, where maps are replayed, a block of query rows at a time from the replayed queries
and keys, so a text of any length the model takes needs no (seq, seq) matrix."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from atlas_engine import compute
from atlas_engine.inference.forward import ForwardResult
from atlas_engine.inference.replay import NotBlockwise, replayed_qk, visible_keys
from atlas_engine.inference.tokens import token_facts
from atlas_engine.models.families import Architecture
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.heads import MARKED
from attention_core.head_stats import HeadStatistics, layer_statistics_by_rows
from attention_core.marked import MarkedShare
from attention_core.scratch import Scratch
from attention_core.tiles import row_weights

ShouldStop = Callable[[], bool] | None

BLOCK_BYTES = 24 * 2**20
"""What one block of query rows may hold while its statistics are computed: its scores and
weights for every head, and the key sets of its rows (see _bytes_per_row)."""


def _bytes_per_row(heads: int, seq: int) -> int:
    """Bytes one query row of a block holds at most: for every head its scores, weights,
    entropy terms and the weights' copy an einsum makes (4 x heads float32 a key), and its key
    sets (attention_core.head_stats._key_sets: five float32 sets, two int32 distances and
    seven boolean parts, 35 bytes a key at most, so 10 float32 a key)."""
    return 4 * seq * (4 * heads + 10)


def rows_per_block(heads: int, seq: int) -> int:
    """How many query rows a block takes within BLOCK_BYTES (at least one)."""
    return max(1, BLOCK_BYTES // _bytes_per_row(heads, seq))


def working_bytes(arch: Architecture, seq: int) -> int:
    """What computing statistics block by block holds besides the forward pass: one layer's
    replay inputs, queries and keys (hidden states, q and k per query head) and one block."""
    replay = 4 * seq * (arch.d_model + 2 * arch.num_heads * arch.head_dim)
    return replay + rows_per_block(arch.num_heads, seq) * _bytes_per_row(arch.num_heads, seq)


def _row_blocks(
    loaded: LoadedModel,
    result: ForwardResult,
    layer: int,
    should_stop: ShouldStop,
    span: tuple[int, int] | None = None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(first row, whole rows of every head (heads, rows, keys)) of one layer, over the rows
    span[0]:span[1] (every row by default): a view of its kept maps, or replayed."""
    seq = result.seq_len
    start, stop = span or (0, seq)
    if result.stored_maps is not None:
        yield start, result.layer_maps(layer)[:, start:stop]
        return
    heads = list(range(loaded.arch.num_heads))
    try:
        pair = replayed_qk(loaded.id, result.calls, result.hidden_inputs, layer, heads)
    except NotBlockwise:
        if seq > loaded.full_map_tokens:
            raise
        yield start, result.layer_maps(layer)[:, start:stop]  # a short text's whole maps
        return
    step = rows_per_block(len(heads), seq)
    between_blocks = compute.between_steps(should_stop, "the statistics")
    # Each block's scores and weights are written in the same two buffers. The blocks go from
    # the last rows to the first: a causal block's keys end at its last row, so the first block
    # is the largest and every later one fits in the buffers it made.
    scratch = Scratch()
    for r1 in range(stop, start, -step):
        between_blocks()  # a short job waiting goes between two blocks (seconds a layer)
        r0 = max(start, r1 - step)
        rows = (r0, r1)
        with torch.inference_mode():
            yield (
                r0,
                row_weights(
                    pair.q,
                    pair.k,
                    rows,
                    causal=loaded.causal,
                    factor=pair.factor,
                    scratch=scratch,
                    extras=pair.extras,
                ),
            )


def _observed(
    blocks: Iterator[tuple[int, Tensor]], share: MarkedShare
) -> Iterator[tuple[int, Tensor]]:
    """The blocks as they are, each also added to `share` on its way."""
    for first_row, weights in blocks:
        share.add(first_row, weights)
        yield first_row, weights


def statistics_of(
    loaded: LoadedModel,
    result: ForwardResult,
    layers: list[int] | None = None,
    should_stop: ShouldStop = None,
    marked: Tensor | None = None,
    readers: Tensor | None = None,
) -> HeadStatistics:
    """The statistics of every head of these layers (all by default): values[name] is
    (len(layers), heads). From the kept maps a layer at a time, or from the replay a block of
    rows at a time (within the replay's bound of the model's own maps). Each layer's numbers are
    kept with the forward pass (a few hundred bytes), so a search after /heads, or a layer asked
    again, costs nothing. marked: (seq,) bool, tokens whose share of each head's attention is
    the statistic 'marked' (attention_core.marked; readers: (seq,) bool, the rows it averages),
    in the same pass over the blocks as the others where they are not kept yet."""
    chosen = list(range(loaded.arch.num_layers)) if layers is None else layers
    facts = None  # read from the tokens only if a layer is not kept yet
    per_layer = []
    for layer in chosen:
        stats = result.statistics.get(layer)  # a layer once computed is kept with the pass
        share = None
        if marked is not None:
            share = MarkedShare(marked, loaded.arch.num_heads, loaded.causal, readers)
        if stats is None:
            if facts is None:
                facts = token_facts(loaded, result)
            blocks = _row_blocks(loaded, result, layer, should_stop)
            if share is not None:
                blocks = _observed(blocks, share)
            window = visible_keys(result.calls, layer, result.seq_len)
            stats = layer_statistics_by_rows(blocks, facts, loaded.causal, window)
            result.statistics[layer] = stats
        elif share is not None and (span := share.span()) is not None:
            # The statistics are kept; the share needs only the rows it averages.
            for first_row, weights in _row_blocks(loaded, result, layer, should_stop, span):
                share.add(first_row, weights)
        per_layer.append(stats if share is None else {**stats, MARKED: share.values()})
    return HeadStatistics(
        values={name: torch.stack([s[name] for s in per_layer]) for name in per_layer[0]}
    )


def pair_weights(loaded: LoadedModel, result: ForwardResult, source: int, target: int) -> Tensor:
    """(layers, heads): the weight query `source` gives key `target` in every head, from the
    kept maps or from one replayed row per layer."""
    if result.stored_maps is not None:
        return result.stored_maps[:, :, source, target]
    heads = list(range(loaded.arch.num_heads))
    out = torch.zeros(loaded.arch.num_layers, len(heads))
    for layer in range(loaded.arch.num_layers):
        try:
            pair = replayed_qk(loaded.id, result.calls, result.hidden_inputs, layer, heads)
        except NotBlockwise:
            if result.seq_len > loaded.full_map_tokens:
                raise
            out[layer] = result.layer_maps(layer)[:, source, target]
            continue
        with torch.inference_mode():
            row = row_weights(
                pair.q,
                pair.k,
                (source, source + 1),
                causal=loaded.causal,
                factor=pair.factor,
                extras=pair.extras,
            )  # (heads, 1, keys)
        if target < row.shape[-1]:  # a causal row gives later keys nothing
            out[layer] = row[:, 0, target].to("cpu", torch.float32)
    return out
