"""HeadVis's numbers of a corpus run for the pages: its six metrics of every head, and one
head's file (sampled sequences, histograms, top tokens). A run the job described computes them
from what the store kept (atlas_engine.corpus.headvis_tree.RunNumbers); an imported run reads
the tree's own files."""

from __future__ import annotations

import json

import numpy as np

from atlas_engine.corpus.headvis_tree import RunNumbers
from atlas_engine.corpus.sampling import HeadVisSettings
from atlas_engine.corpus.store import Run, Store
from atlas_engine.errors import InvalidInput
from atlas_engine.schemas.corpus import HeadVisHead
from attention_core import headvis


def headvis_metrics(store: Store, run: Run) -> dict[str, np.ndarray]:
    """{metric: (layers, heads)} HeadVis's six, 4 decimals as a tree writes them (NaN where
    undefined); {} for a run made before the job kept them."""
    if run.source == "headvis":
        rows = json.loads(store.tree_file(run, "scatter_data.json") or "[]")
        grids = {name: np.full((run.layers, run.heads), np.nan) for name in headvis.METRICS}
        for row in rows:
            for name in headvis.METRICS:
                value = row.get(name)
                if value is not None:
                    grids[name][row["layer"], row["head"]] = value
        return grids
    if run.headvis is None:
        return {}
    numbers = RunNumbers(store, run)
    if len(numbers.idx) == 0:
        return {}
    return {name: np.round(grid, 4) for name, grid in numbers.metrics().items()}


def headvis_head(store: Store, run: Run, layer: int, head: int, fields) -> HeadVisHead:
    """One head of the run as HeadVis shows it (fields: the run's CorpusRun)."""
    if not (0 <= layer < run.layers and 0 <= head < run.heads):
        raise InvalidInput(
            f"layer {layer} head {head} is not in {run.model} ({run.layers} layers × "
            f"{run.heads} heads)"
        )
    settings = HeadVisSettings.of(run)
    if run.source == "headvis":
        body = store.tree_file(run, f"heads/L{layer}H{head}.json")
        if body is None:
            raise InvalidInput(f"the imported tree of run {run.id} has no file for L{layer}H{head}")
        found = json.loads(body)
    else:
        if run.headvis is None or not store.headvis_rows(run)[0].size:
            raise InvalidInput(
                f"corpus run {run.id} has no HeadVis numbers yet: the corpus job adds them to "
                "each text it finishes"
            )
        numbers = RunNumbers(store, run)
        found = numbers.head_file(layer, head)
        ids = {int(numbers.idx[s["sequence_id"]]): s for s in found["sequences"]}
        texts = store.texts(run, list(ids))
        found["sequences"] = [{**s, "text": texts[idx]} for idx, s in ids.items()]
    grids = headvis_metrics(store, run)
    stats = found.get("statistics") or {}

    def bins(block: object) -> dict | None:
        ok = isinstance(block, dict) and block.get("bin_values")
        return block if ok and len(block["bin_edges"]) > len(block["bin_values"]) else None

    return HeadVisHead(
        run=fields, layer=layer, head=head,
        metrics={name: (None if np.isnan(g[layer, head]) else float(g[layer, head]))
                 for name, g in grids.items()},
        n_intervals=settings.n_intervals, causal=settings.causal,
        sequences=[
            {"interval": 0, "max_activation": 0.0, "sequence_id": n, **seq,
             "seq_len": len(seq["tokens"])}
            for n, seq in enumerate(found.get("sequences", []))
        ],
        qk_distance_histogram=bins(found.get("qk_distance_histogram")),
        top_query_tokens=found.get("top_query_tokens", []),
        top_key_tokens=found.get("top_key_tokens", []),
        histogram=bins(found.get("histogram")),
        n_samples=stats.get("n_samples", len(found.get("sequences", []))),
        mean_max_activation=stats.get("mean_max_activation"),
    )  # fmt: skip
