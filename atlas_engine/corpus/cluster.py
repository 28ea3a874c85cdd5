"""The corpus job's texts on a Dask cluster, written to the same store as the in-process job.

Each worker process loads the model once (the same ModelManager the server builds from the
same settings: ATLAS_* in its environment and the `extra` models passed along) and describes
the texts it is handed (atlas_engine.corpus.job.describe_text); the client writes each text's results
as they come back, so the store has one writer and a stopped or crashed job resumes as the
in-process one does.

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

from atlas_engine.corpus.job import TextResult, describe_text
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
    model_id: str, extra: list[str], idx: int, text: str, settings: HeadVisSettings
) -> tuple[int, TextResult, float]:
    """A worker's task: (idx, the text described, seconds)."""
    loaded = _model(model_id, extra)
    began = time.perf_counter()
    return idx, describe_text(loaded, text, settings), time.perf_counter() - began


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
) -> Run:
    """Every text of the run not done yet, described on the cluster's workers and written here
    as each comes back; stopping cancels what has not started. The warm-up's texts go first
    (they set HeadVis's interval boundaries, atlas_engine.corpus.sampling), then the rest."""
    from dask.distributed import as_completed

    sampler = Sampler(store, run)
    pending = store.pending(run.id)
    warm = [item for item in pending if item[0] < sampler.settings.warmup_size]
    done, tokens, started = run.done, 0, time.perf_counter()
    for part in (warm, pending[len(warm) :]):
        futures = [
            client.submit(describe_on_worker, model_id, extra, idx, text, sampler.settings,
                          pure=False)
            for idx, text in part
        ]  # fmt: skip
        try:
            for future in as_completed(futures):
                idx, found, seconds = future.result()
                sampler.record(idx, found, found.keys, found.values, seconds)
                done += 1
                tokens += found.tokens
                progress(done, run.planned, tokens / max(1e-9, time.perf_counter() - started))
                if should_stop():
                    return store.run(run.id)
        finally:
            client.cancel([f for f in futures if not f.done()])
    return store.run(run.id)
