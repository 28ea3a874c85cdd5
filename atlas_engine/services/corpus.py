"""What a corpus job found, read from the store for the head pages and Head roles' scatter."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

from atlas_engine.corpus.background import ModelProgress
from atlas_engine.corpus.store import Run, Store, open_or_set_aside, set_aside_note
from atlas_engine.errors import InvalidInput, NotFound
from atlas_engine.schemas.corpus import (
    BackgroundProgress,
    CorpusHeads,
    CorpusRun,
    CorpusRuns,
    HeadDashboard,
)
from atlas_engine.services.headvis import headvis_metrics
from attention_core.head_stats import ROLES

HISTOGRAM_BINS = 20
TOKENS_SHOWN = 12


def open_store(path: str) -> Store | None:
    """The store, or None where no job has written one yet; one that cannot be read is moved
    aside (StoreUnavailable: 503, saying where it went)."""
    return open_or_set_aside(Path(path)) if Path(path).is_file() else None


def run_fields(run: Run) -> CorpusRun:
    return CorpusRun(
        id=run.id, model=run.model, corpus=run.corpus, sequence_tokens=run.sequence_tokens,
        planned=run.planned, done=run.done,
        statistics=run.statistics if run.source == "atlas" else [], layers=run.layers,
        heads=run.heads, source=run.source,
    )  # fmt: skip


def corpus_runs(
    store: Store | None, path: str, background: list[ModelProgress] | None = None
) -> CorpusRuns:
    """The store's runs, and where the server's background job stands (a row a model)."""
    return CorpusRuns(
        runs=[run_fields(r) for r in store.runs()] if store else [],
        store=path,
        background=[BackgroundProgress(**asdict(p)) for p in background or []],
        problem=set_aside_note(path),
    )


def find_run(store: Store | None, run_id: int) -> Run:
    runs = {r.id: r for r in store.runs()} if store else {}
    if run_id not in runs:
        known = ", ".join(f"{r.id} ({r.model} on {r.corpus})" for r in runs.values()) or "none yet"
        raise NotFound(
            f"no corpus run {run_id}; runs: {known}. `atlas corpus run --model M` makes one"
        )
    run = runs[run_id]
    if run.done == 0:
        raise InvalidInput(f"corpus run {run_id} has no finished text yet")
    return run


def _nan_to_none(grid: np.ndarray) -> list:
    return [[None if not math.isfinite(v) else float(v) for v in row] for row in grid.tolist()]


def _roles(means: dict[str, np.ndarray], layer: int, head: int) -> list[str]:
    found = []
    for role, (name, threshold) in ROLES.items():
        value = means[name][layer, head]
        if math.isfinite(value) and value >= threshold:
            found.append((role, value))
    return [role for role, _ in sorted(found, key=lambda item: -item[1])]


def _means(run: Run, stats: np.ndarray) -> tuple[dict, dict]:
    """{statistic: (layers, heads)} means and standard deviations over texts (NaN ignored)."""
    means, spread = {}, {}
    for i, name in enumerate(run.statistics):
        values = stats[..., i].astype(np.float64)  # (texts, layers, heads)
        counted = np.isfinite(values)
        total = np.where(counted, values, 0).sum(0)
        n = counted.sum(0)
        mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
        square = np.where(counted, (values - mean) ** 2, 0).sum(0)
        means[name] = mean
        spread[name] = np.where(n > 0, np.sqrt(square / np.maximum(n, 1)), np.nan)
    return means, spread


def corpus_heads(store: Store | None, run_id: int) -> CorpusHeads:
    """Atlas's statistics (means and spread over texts) and HeadVis's six metrics of every
    head; a run imported from a HeadVis tree has HeadVis's only."""
    run = find_run(store, run_id)
    pooled = headvis_metrics(store, run)
    if run.source == "headvis":
        return CorpusHeads(
            run=run_fields(run), statistics={k: _nan_to_none(v) for k, v in pooled.items()},
            spread={}, roles=[[[] for _ in range(run.heads)] for _ in range(run.layers)],
            headvis=list(pooled),
        )  # fmt: skip
    _, stats, _ = store.statistics(run)
    means, spread = _means(run, stats)
    return CorpusHeads(
        run=run_fields(run),
        statistics={name: _nan_to_none(grid) for name, grid in {**means, **pooled}.items()},
        spread={name: _nan_to_none(grid) for name, grid in spread.items()},
        roles=[[_roles(means, i, h) for h in range(run.heads)] for i in range(run.layers)],
        headvis=list(pooled),
    )


def head_dashboard(
    store: Store | None,
    run_id: int,
    layer: int,
    head: int,
    metric: str | None,
    per_decile: int,
) -> HeadDashboard:
    """One head over the corpus: see HeadDashboard."""
    run = find_run(store, run_id)
    if run.source == "headvis":
        raise InvalidInput(
            f"corpus run {run_id} was imported from a HeadVis tree, which keeps no per-text "
            f"statistics: GET /api/corpus/{run_id}/heads/{layer}/{head}/headvis has its numbers"
        )
    if not (0 <= layer < run.layers and 0 <= head < run.heads):
        raise InvalidInput(
            f"layer {layer} head {head} is not in {run.model} ({run.layers} layers × "
            f"{run.heads} heads)"
        )
    idx, stats, hist = store.statistics(run)
    means, _ = _means(run, stats)
    roles = _roles(means, layer, head)
    chosen = metric or (ROLES[roles[0]][0] if roles else "max_weight")
    if chosen not in run.statistics:
        raise InvalidInput(f"metric must be one of {', '.join(run.statistics)}; got {chosen!r}")
    values = stats[:, layer, head, run.statistics.index(chosen)].astype(np.float64)
    histograms = {}
    for i, name in enumerate(run.statistics):
        column = stats[:, layer, head, i]
        column = column[np.isfinite(column)]
        top = 1.0 if name != "distance" else max(1.0, float(column.max(initial=1.0)))
        counts, edges = np.histogram(column, bins=HISTOGRAM_BINS, range=(0.0, top))
        histograms[name] = {"edges": edges.tolist(), "counts": counts.tolist()}
    texts = _by_decile(idx, values, per_decile)
    found = store.texts(run, [i for i, _, _ in texts])
    distance = hist[:, layer, head].astype(np.float64).sum(0)
    return HeadDashboard(
        run=run_fields(run), layer=layer, head=head, metric=chosen,
        statistics={k: (None if not math.isfinite(v[layer, head]) else float(v[layer, head]))
                    for k, v in means.items()},
        roles=roles, histograms=histograms,
        texts=[{"idx": i, "decile": d, "value": v, "text": found[i]} for i, d, v in texts],
        to_tokens=_tokens(store, run, layer, head, "to"),
        from_tokens=_tokens(store, run, layer, head, "from"),
        distance_edges=run.bins,
        distance=(distance / max(distance.sum(), 1e-12)).tolist(),
    )  # fmt: skip


def _by_decile(
    idx: np.ndarray, values: np.ndarray, per_decile: int
) -> list[tuple[int, int, float]]:
    """(text, decile, value): the highest `per_decile` texts of each tenth of the ranking,
    highest first; the text ranked r of n (0 the highest) is in decile 9 - floor(10 r / n)."""
    counted = np.isfinite(values)
    order = np.argsort(-np.where(counted, values, -np.inf), kind="stable")[: counted.sum()]
    n = len(order)
    taken: dict[int, int] = {}
    out = []
    for rank, position in enumerate(order):
        decile = 9 - (10 * rank) // n
        if taken.get(decile, 0) < per_decile:
            taken[decile] = taken.get(decile, 0) + 1
            out.append((int(idx[position]), decile, float(values[position])))
    return out


def _tokens(store: Store, run: Run, layer: int, head: int, side: str) -> list[dict]:
    rows = store.top_tokens(run, layer, head, side, TOKENS_SHOWN)
    labels = store.labels(run, [r[0] for r in rows])
    return [
        {"token_id": t, "token": labels.get(t, str(t)), "weight": w, "texts": n} for t, w, n in rows
    ]
