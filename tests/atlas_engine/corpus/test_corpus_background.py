"""The corpus job beside the server (atlas_engine.corpus.background): it describes each model
as the foreground job does, goes on where a stopped server left off, waits for a corpus that is
still being installed, goes after every request on the heavy lane, and reports where it stands
through GET /api/corpus."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine import compute
from atlas_engine.corpus import background
from atlas_engine.corpus.background import BackgroundCorpus, describe, duration
from atlas_engine.corpus.job import describe_batch, describe_text
from atlas_engine.corpus.store import Store
from tests.atlas_engine.corpus.test_corpus import PROSE
from tests.conftest import make_settings

pytestmark = pytest.mark.slow
MODEL = "local/qwen2-tiny"


@pytest.fixture()
def manager(local_checkpoints, tmp_path):
    return create_app(make_settings(local_checkpoints)).state.manager


def finished(job: BackgroundCorpus, seconds: float = 60.0) -> None:
    job.join(seconds)
    assert all(p.state in ("done", "failed") for p in job.progress()), job.progress()


def test_the_background_job_stores_what_the_foreground_job_computes(manager, tmp_path):
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    job = BackgroundCorpus(manager.get, tmp_path / "c.sqlite", [MODEL], 3, str(source), 48)
    job.start()
    finished(job)
    [progress] = job.progress()
    assert (progress.state, progress.done, progress.planned) == ("done", 3, 3)
    assert progress.tokens_per_second > 0 and progress.seconds_left == 0
    store = Store(tmp_path / "c.sqlite")
    [run] = store.runs()
    idx, stats, hist = store.statistics(run)
    texts = store.texts(run, idx.tolist())
    for i, n in enumerate(idx.tolist()):
        alone = describe_text(manager.get(MODEL), texts[n])  # in a batch there: float32 noise
        np.testing.assert_allclose(stats[i], alone.stats, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(hist[i], alone.hist, rtol=1e-5, atol=1e-5)


def test_a_stopped_server_goes_on_where_it_was(manager, tmp_path, monkeypatch):
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    path = tmp_path / "c.sqlite"
    first = BackgroundCorpus(manager.get, path, [MODEL], 4, str(source), 48)
    first.start()
    finished(first)
    store = Store(path)
    [run] = store.runs()
    with store._transaction() as db:  # as if the server had stopped before texts 1 and 3
        db.execute("DELETE FROM done WHERE run = ? AND idx IN (1, 3)", (run.id,))
    described = []
    monkeypatch.setattr(
        background,
        "describe_batch",
        lambda loaded, texts, *rest: (
            described.extend(texts) or describe_batch(loaded, texts, *rest)
        ),
    )
    again = BackgroundCorpus(manager.get, path, [MODEL], 4, str(source), 48)
    again.start()
    finished(again)
    assert sorted(described) == sorted(store.texts(run, [1, 3]).values())
    assert again.progress()[0].done == 4 and store.run(run.id).done == 4


def test_it_waits_for_a_corpus_still_being_installed(manager, tmp_path, monkeypatch):
    monkeypatch.setattr(background, "CORPUS_POLL_SECONDS", 0.05)
    source = tmp_path / "later.txt"
    job = BackgroundCorpus(manager.get, tmp_path / "c.sqlite", [MODEL], 2, str(source), 48)
    job.start()
    deadline = time.monotonic() + 30
    while job.progress()[0].state != "waiting" and time.monotonic() < deadline:
        time.sleep(0.02)
    waiting = job.progress()[0]
    assert waiting.state == "waiting" and "no corpus named" in waiting.detail
    source.write_text(PROSE)
    finished(job)
    assert job.progress()[0].state == "done" and job.progress()[0].done == 2


def test_a_model_that_cannot_load_is_reported_and_the_next_goes_on(manager, tmp_path):
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    job = BackgroundCorpus(
        manager.get, tmp_path / "c.sqlite", ["nobody/absent", MODEL], 2, str(source), 48
    )
    job.start()
    finished(job)
    absent, tiny = job.progress()
    assert absent.state == "failed" and "nobody/absent" in absent.detail
    assert tiny.state == "done" and tiny.done == 2


def test_requests_waiting_for_the_heavy_lane_go_before_the_next_text():
    order: list[str] = []
    release = threading.Event()
    running = compute._heavy.submit(lambda: release.wait(10) and order.append("running"))
    time.sleep(0.05)  # the lane is busy with it
    request = compute._heavy.submit(lambda: order.append("request"), seconds=5.0)
    idle = threading.Thread(
        target=compute.run_when_idle,
        args=(lambda: order.append("background"),),
        kwargs={"model": "m"},
    )
    idle.start()
    time.sleep(0.2)
    assert order == []  # the background work has not even been queued while a request waits
    release.set()
    idle.join(10)
    running.result(10), request.result(10)
    assert order == ["running", "request", "background"]


def test_the_api_reports_the_job_and_a_log_line_reads_as_a_sentence(local_checkpoints, tmp_path):
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    settings = make_settings(
        local_checkpoints, corpus_store=str(tmp_path / "c.sqlite"), corpus_texts=2,
        corpus_models=[MODEL], corpus_source=str(source),
    )  # fmt: skip
    app = create_app(settings)
    with TestClient(app) as client:
        finished(app.state.corpus_job)
        answer = client.get("/api/corpus").json()
    [row] = answer["background"]
    assert row["model"] == MODEL and row["state"] == "done" and row["done"] == 2
    assert answer["runs"][0]["done"] == 2
    line = describe(app.state.corpus_job.progress()[0])
    assert line.startswith(f"{MODEL} 2 of 2 texts, ") and line.endswith(" tokens/s, done")
    assert [duration(s) for s in (0.2, 59, 61, 3600 + 300)] == ["1 s", "59 s", "1 min", "1 h 5 min"]


def test_no_job_runs_unless_asked(client):
    assert client.get("/api/corpus").json()["background"] == []


def test_background_work_waits_for_a_quiet_moment_after_a_request(monkeypatch):
    """A page in use sends requests in bursts: the corpus job starts no text until none has
    come for QUIET_SECONDS, so a burst has the cores to itself."""
    monkeypatch.setattr(compute, "QUIET_SECONDS", 0.3)
    monkeypatch.setattr(compute, "_last_request", time.monotonic())
    assert not compute.idle()
    started = time.monotonic()
    compute.run_when_idle(lambda: None, model="m")
    assert time.monotonic() - started >= 0.25 and compute.idle()
