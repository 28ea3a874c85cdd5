"""The corpus job on a local Dask cluster of two worker processes writes what the in-process
job writes (atlas_engine.corpus.cluster): every statistic, histogram and token of every text,
and HeadVis's metrics and each head's sampled sequences (the whole exported tree)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.corpus.cluster import connect, run_on_cluster
from atlas_engine.corpus.headvis_tree import tree_files
from atlas_engine.corpus.job import plan, run_job
from atlas_engine.corpus.store import Store
from tests.atlas_engine.corpus.test_corpus import PROSE

pytestmark = pytest.mark.slow
MODEL = "local/qwen2-tiny"


def test_two_workers_write_what_one_process_writes(local_checkpoints, tmp_path):
    extra = [f"{MODEL}={local_checkpoints[MODEL]}"]
    source = tmp_path / "prose.txt"
    source.write_text(PROSE)
    loaded = create_app(Settings(preload=[], extra_models=extra)).state.manager.get(MODEL)

    here = Store(tmp_path / "here.sqlite")
    run = run_job(loaded, here, plan(here, loaded, str(source), 40, limit=6))
    there = Store(tmp_path / "there.sqlite")
    planned = plan(there, loaded, str(source), 40, limit=6)
    with connect("local:2") as client:
        assert len(client.scheduler_info()["workers"]) == 2
        seen = []
        far = run_on_cluster(client, MODEL, extra, there, planned,
                             progress=lambda done, total, rate: seen.append(done))  # fmt: skip
        workers = client.run(lambda: __import__("os").getpid())
    assert far.done == run.done == run.planned >= 4 and sorted(seen) == seen
    assert len(set(workers.values())) == 2
    idx_a, stats_a, hist_a = here.statistics(run)
    idx_b, stats_b, hist_b = there.statistics(far)
    assert idx_a.tolist() == idx_b.tolist()
    np.testing.assert_allclose(stats_a, stats_b, rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(hist_a, hist_b, rtol=1e-5, atol=1e-5)
    for layer, head in ((0, 0), (1, 3)):
        for side in ("to", "from"):
            a = here.top_tokens(run, layer, head, side, 5)
            b = there.top_tokens(far, layer, head, side, 5)
            assert [t for t, _, _ in a] == [t for t, _, _ in b]
            np.testing.assert_allclose([w for _, w, _ in a], [w for _, w, _ in b], rtol=1e-5)
    ours, theirs = tree_files(here, run), tree_files(there, far)
    assert ours.keys() == theirs.keys()
    for name in ours.keys() - {"config.json"}:  # config.json differs only in created_at
        assert_same(json.loads(ours[name]), json.loads(theirs[name]), name)


def assert_same(a, b, where: str) -> None:
    """Equal JSON, numbers to HeadVis's 4 decimals (threads may sum in another order)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{n}]")
    elif isinstance(a, float):
        assert b == pytest.approx(a, abs=1.01e-4), where
    else:
        assert a == b, where
