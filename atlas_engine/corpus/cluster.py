"""The corpus job's texts on a Dask cluster, written to the same store as the in-process job.

Each worker process loads the model once (the same ModelManager the server builds from the
same settings: ATLAS_* in its environment and the `extra` models passed along) and describes
the batches of texts it is handed (atlas_engine.corpus.job.describe_batch, the batches cut as
the in-process job cuts them); the client writes each batch's results as they come back, so
the store has one writer and a stopped or crashed job resumes as the in-process one does.

Dask was chosen over Ray by measuring both here (docs/corpus.md): for this job's tasks (a
text takes 0.1 s or more) their per-task overhead (2.0 and 1.3-1.7 ms) does not matter, while
Dask installs in 70 MB against Ray's 285 MB and starts a two-worker local cluster in 1.4 s
against 3.4-5.1 s.

A real cluster: start `dask scheduler` on one machine and `dask worker tcp://<scheduler>:8786`
on each machine that has Atlas installed (the model's files where the settings say), then
`atlas corpus run --model M --cluster tcp://<scheduler>:8786`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from atlas_engine.corpus.job import BATCH_TEXTS, TextResult, batches, describe_batch
from atlas_engine.corpus.sampling import HeadVisSettings, Sampler
from atlas_engine.corpus.store import Run, Store

_loaded: dict = {}  # in a worker process: model id -> the LoadedModel it described with


def _model(model_id: str, extra: list[str]):
    """The worker's model, loaded on its first text."""
    if model_id not in _loaded:
        from atlas_engine.config import Settings
        from atlas_engine.models.manager import ModelManager

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        settings = Settings(preload=[], extra_models=extra)
        _loaded[model_id] = ModelManager.from_settings(settings, max_loaded=1).get(model_id)
    return _loaded[model_id]


def describe_on_worker(
    model_id: str, extra: list[str], items: list[tuple[int, str]], settings: HeadVisSettings
) -> list[tuple[int, TextResult, float]]:
    """A worker's task: texts (idx, text) -> (idx, the text described, seconds) each, in the
    batches the in-process job would cut of them (atlas_engine.corpus.job.batches: sorted by
    length, the maps' memory bounded)."""
    loaded = _model(model_id, extra)
    out = []
    for batch in batches(loaded, items, len(items)):
        began = time.perf_counter()
        found = describe_batch(loaded, [text for _, text in batch], settings)
        seconds = (time.perf_counter() - began) / len(batch)
        out += [(idx, one, seconds) for (idx, _), one in zip(batch, found, strict=True)]
    return out


def connect(cluster: str):
    """A Dask client: "local:N" starts N worker processes here (one thread each), anything
    else is a scheduler's address (tcp://host:8786)."""
    from dask.distributed import Client, LocalCluster

    if cluster.startswith("local:"):
        workers = int(cluster.split(":", 1)[1])
        local = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        return Client(local)
    return Client(cluster)


def run_on_cluster(
    client,
    model_id: str,
    extra: list[str],
    store: Store,
    run: Run,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int, float], None] = lambda done, planned, rate: None,
    batch_size: int = BATCH_TEXTS,
) -> Run:
    """Every text of the run not done yet, described on the cluster's workers a task of
    `batch_size` texts at a time (a worker cuts it into batches as the in-process job does) and
    written here as each task comes back, in one transaction; stopping cancels what has not
    started. The warm-up's texts go first and all finish before the rest is handed out (they
    set HeadVis's interval boundaries, atlas_engine.corpus.sampling)."""
    from dask.distributed import as_completed

    sampler = Sampler(store, run)
    pending = store.pending(run.id)
    warm = [item for item in pending if item[0] < sampler.settings.warmup_size]
    rest = [item for item in pending if item[0] >= sampler.settings.warmup_size]
    done, tokens, started = run.done, 0, time.perf_counter()
    for part in (warm, rest):
        futures = [
            client.submit(describe_on_worker, model_id, extra, batch, sampler.settings,
                          pure=False)
            for batch in (part[i : i + batch_size] for i in range(0, len(part), batch_size))
        ]  # fmt: skip
        try:
            for future in as_completed(futures):
                found = future.result()
                sampler.record_many([(idx, one, one.keys, one.values, seconds)
                                     for idx, one, seconds in found])  # fmt: skip
                for _, one, _ in found:
                    done += 1
                    tokens += one.tokens
                    progress(done, run.planned, tokens / max(1e-9, time.perf_counter() - started))
                if should_stop():
                    return store.run(run.id)
        finally:
            client.cancel([f for f in futures if not f.done()])
    return store.run(run.id)
