"""The corpus job: a corpus's texts through a model, each head described on each text, kept in
the store (atlas_engine.corpus.store) as each text finishes, so a job stopped or crashed resumes where
it was without computing a finished text again.

Per text, one forward pass with eager attention hands over every layer's maps as the model
computes them (atlas_engine.inference.forward.run_forward's keep_maps: no replay), and per layer:
every head statistic of the explorer's Head roles (attention_core.head_stats, the sliding
window's own visible keys where a layer has one), the attention-weighted distance histogram
and the few tokens each head reads most and that read most sharply
(attention_core.corpus_stats).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from atlas_engine.corpus.store import Run, Store
from atlas_engine.corpus.texts import paragraphs, sequences
from atlas_engine.inference.forward import run_forward
from atlas_engine.inference.replay import visible_keys
from atlas_engine.inference.tokens import token_facts
from atlas_engine.models.loader import LoadedModel
from attention_core.corpus_stats import DISTANCE_EDGES, distance_histogram, strongest_tokens
from attention_core.head_stats import STATISTICS, layer_statistics_by_rows

TOKENS_KEPT = 5  # a head's tokens kept per text and side
MAX_SEQUENCE_TOKENS = 512


@dataclass(frozen=True)
class TextResult:
    tokens: int
    stats: np.ndarray  # (layers, heads, statistics) float32
    hist: np.ndarray  # (layers, heads, bins) float32
    head_tokens: list[tuple[int, int, str, int, float]]  # (layer, head, side, token_id, weight)
    labels: dict[int, str]  # token_id -> its label, for the tokens in head_tokens


def plan(store: Store, loaded: LoadedModel, corpus: str, tokens: int, limit: int) -> Run:
    """The run of (model, corpus, tokens): the stored one, or a new one with its texts cut
    from the corpus (at most `limit`). An existing run keeps its texts: a resumed job reads
    exactly what the first one planned."""
    if not 16 <= tokens <= min(MAX_SEQUENCE_TOKENS, loaded.max_tokens):
        raise ValueError(
            f"sequences of {tokens} tokens: choose 16 to {min(MAX_SEQUENCE_TOKENS, loaded.max_tokens)}"
        )
    found = store.run_for(loaded.id, corpus, tokens)
    if found is not None:
        return found

    def count(text: str) -> int:
        return len(loaded.tokenizer(text)["input_ids"])

    texts = list(sequences(paragraphs(corpus), count, tokens, limit))
    if not texts:
        raise ValueError(f"the corpus {corpus!r} gave no text")
    shape = (loaded.arch.num_layers, loaded.arch.num_heads)
    return store.create_run(
        loaded.id, corpus, tokens, shape, list(STATISTICS), list(DISTANCE_EDGES), texts
    )


def describe_text(loaded: LoadedModel, text: str) -> TextResult:
    """Every head of the model on one text (see the module docstring). The layers whose mask
    is plain (no sliding window) are described together, as one stack of heads: one call of
    each function for the whole model instead of one a layer."""
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
    return TextResult(
        labels={token: shown[token] for token in {row[3] for row in rows}},
        tokens=result.seq_len,
        stats=stats.numpy(),
        hist=hist.numpy(),
        head_tokens=rows,
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
    for idx, text in store.pending(run.id):
        if should_stop():
            break
        began = time.perf_counter()
        found = describe_text(loaded, text)
        store.finish(run.id, idx, found.tokens, found.stats, found.hist,
                     time.perf_counter() - began, found.head_tokens, found.labels)  # fmt: skip
        done += 1
        tokens += found.tokens
        progress(done, run.planned, tokens / max(1e-9, time.perf_counter() - started))
    return store.run(run.id)
