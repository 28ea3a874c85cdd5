"""The corpus job: a corpus's texts through a model, each head described on each text, kept in
the store (atlas_engine.corpus.store) as each text finishes, so a job stopped or crashed resumes where
it was without computing a finished text again.

Per text, one forward pass with eager attention hands over every layer's maps as the model
computes them (atlas_engine.inference.forward.run_forward's keep_maps: no replay), and per layer:
every head statistic of the explorer's Head roles (attention_core.head_stats, the sliding
window's own visible keys where a layer has one), the attention-weighted distance histogram
and the few tokens each head reads most and that read most sharply
(attention_core.corpus_stats); and HeadVis's numbers (attention_core.headvis): the sums that pool
into its six metrics, max_activation, and the sparse map the heads that keep the text store
(atlas_engine.corpus.sampling).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from atlas_engine.corpus.sampling import HeadVisSettings, Sampler
from atlas_engine.corpus.store import Run, Store, TextRow
from atlas_engine.corpus.texts import paragraphs, sequences
from atlas_engine.inference.forward import run_forward
from atlas_engine.inference.replay import visible_keys
from atlas_engine.inference.tokens import token_facts
from atlas_engine.models.loader import LoadedModel
from attention_core import headvis
from attention_core.corpus_stats import DISTANCE_EDGES, distance_histogram, strongest_tokens
from attention_core.head_stats import STATISTICS, layer_statistics_by_rows

TOKENS_KEPT = 5  # a head's tokens kept per text and side
MAX_SEQUENCE_TOKENS = 512


@dataclass(frozen=True)
class TextResult(TextRow):
    """A text described: what the store keeps, and every head's sparse map, from which the
    heads that keep the text take theirs."""

    keys: np.ndarray  # (layers · heads, L, k) int64: each row's kept keys
    values: np.ndarray  # (layers · heads, L, k) float32: their weights, 0 where none is kept


def plan(store: Store, loaded: LoadedModel, corpus: str, tokens: int, limit: int) -> Run:
    """The run of (model, corpus, tokens): the stored one, or a new one with its texts cut
    from the corpus (at most `limit`). An existing run keeps its texts: a resumed job reads
    exactly what the first one planned."""
    if not 16 <= tokens <= min(MAX_SEQUENCE_TOKENS, loaded.max_tokens):
        raise ValueError(
            f"sequences of {tokens} tokens: choose 16 to {min(MAX_SEQUENCE_TOKENS, loaded.max_tokens)}"
        )
    found = store.run_for(loaded.id, corpus, tokens)
    if found is not None and found.headvis is None:  # made before HeadVis's numbers were kept
        store.set_headvis(found.id, headvis_settings(loaded, found.planned).as_dict())
        found = store.run(found.id)
    if found is not None:
        return found

    def count(text: str) -> int:
        return len(loaded.tokenizer(text)["input_ids"])

    texts = list(sequences(paragraphs(corpus), count, tokens, limit))
    if not texts:
        raise ValueError(f"the corpus {corpus!r} gave no text")
    shape = (loaded.arch.num_layers, loaded.arch.num_heads)
    return store.create_run(
        loaded.id, corpus, tokens, shape, list(STATISTICS), list(DISTANCE_EDGES), texts,
        headvis_settings(loaded, len(texts)).as_dict(),
    )  # fmt: skip


def headvis_settings(loaded: LoadedModel, planned: int) -> HeadVisSettings:
    """HeadVis's default sampling for a run of `planned` texts, with the model's dtype and mask."""
    dtype = str(next(loaded.model.parameters()).dtype).removeprefix("torch.")
    return HeadVisSettings.for_run(planned, dtype, loaded.causal)


def describe_text(
    loaded: LoadedModel, text: str, settings: HeadVisSettings | None = None
) -> TextResult:
    """Every head of the model on one text (see the module docstring). The layers whose mask
    is plain (no sliding window) are described together, as one stack of heads: one call of
    each function for the whole model instead of one a layer."""
    settings = settings or HeadVisSettings()
    kept: dict[int, torch.Tensor] = {}
    result = run_forward(loaded, text, keep_maps=lambda layer, maps: kept.__setitem__(layer, maps))
    facts = token_facts(loaded, result)
    ignore = facts.special.clone()
    ignore[0] = True  # the first token: where heads park attention they do not use
    layers, heads = loaded.arch.num_layers, loaded.arch.num_heads
    maps = torch.stack(
        [kept.pop(i) if i in kept else result.layer_maps(i) for i in range(layers)]
    )  # (layers, heads, T, T)
    windows = [visible_keys(result.calls, i, result.seq_len) for i in range(layers)]
    stats = torch.empty(layers, heads, len(STATISTICS))
    plain = [i for i in range(layers) if windows[i] is None]
    groups = [(plain, None)] if plain else []
    groups += [([i], windows[i]) for i in range(layers) if windows[i] is not None]
    for group, window in groups:
        stacked = maps[group].flatten(0, 1)  # (len(group) · heads, T, T)
        found = layer_statistics_by_rows([(0, stacked)], facts, loaded.causal, window)
        values = torch.stack([found[name] for name in STATISTICS], dim=-1)
        stats[group] = values.view(len(group), heads, -1)
    flat = maps.flatten(0, 1)  # every head of every layer
    hist = distance_histogram(flat).view(layers, heads, -1)
    to_ids, to_weight, from_ids, from_weight = strongest_tokens(
        flat, facts.ids, ignore, TOKENS_KEPT
    )
    rows = []
    for side, ids, weights in (("to", to_ids, to_weight), ("from", from_ids, from_weight)):
        for n, (row_ids, row_weights) in enumerate(
            zip(ids.tolist(), weights.tolist(), strict=True)
        ):
            for token, weight in zip(row_ids, row_weights, strict=True):
                if token >= 0 and weight > 0:
                    rows.append((n // heads, n % heads, side, token, weight))
    shown = dict(zip(result.token_ids, result.tokens, strict=True))
    lengths = torch.tensor([result.seq_len])
    sums, induction_rows = headvis.sequence_sums(
        flat[None], facts.ids[None], lengths, settings.induction_attention_threshold
    )
    keys, values = headvis.sparse_rows(
        flat[None], lengths, settings.sparse_topk_per_row, settings.sparse_threshold
    )
    return TextResult(
        labels={token: shown[token] for token in {row[3] for row in rows}},
        tokens=result.seq_len,
        stats=stats.numpy(),
        hist=hist.numpy(),
        head_tokens=rows,
        headvis=sums[0].view(layers, heads, -1).numpy(),
        induction_rows=int(induction_rows[0]),
        pieces=[loaded.tokenizer.decode([token]) for token in result.token_ids],
        keys=keys[0].numpy(),
        values=values[0].numpy(),
    )


def run_job(
    loaded: LoadedModel,
    store: Store,
    run: Run,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int, float], None] = lambda done, planned, rate: None,
) -> Run:
    """Every text of the run not done yet, in order; stops between two texts when asked.
    progress(texts done, texts planned, tokens a second so far)."""
    done = run.done
    tokens = 0
    started = time.perf_counter()
    sampler = Sampler(store, run)
    for idx, text in store.pending(run.id):
        if should_stop():
            break
        began = time.perf_counter()
        found = describe_text(loaded, text, sampler.settings)
        sampler.record(idx, found, found.keys, found.values, time.perf_counter() - began)
        done += 1
        tokens += found.tokens
        progress(done, run.planned, tokens / max(1e-9, time.perf_counter() - started))
    return store.run(run.id)
