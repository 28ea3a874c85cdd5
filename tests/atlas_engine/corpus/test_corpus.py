"""The corpus job and its store (atlas_engine.corpus): texts cut as stated, every head's statistics on a
text equal to the explorer's own for that text, a stopped job resumed without recomputing, and
GET /api/corpus... reading it back."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.corpus.job import describe_text, plan, run_job
from atlas_engine.corpus.store import Store
from atlas_engine.corpus.texts import CorpusMissing, paragraphs, rest_paragraphs, sequences
from atlas_engine.inference.forward import run_forward
from atlas_engine.services.head_statistics import statistics_of
from attention_core.head_stats import STATISTICS
from tests.conftest import make_settings

pytestmark = pytest.mark.slow

REST = """.. _intro:

*****
Title
*****

Python is an easy to learn, powerful programming language. It has efficient
high-level data structures and a simple but effective approach to :term:`object-oriented
programming`, as ``print`` shows::

   >>> print("code is left out")

.. note::

   A directive's body is left out too.

* a list item is not running prose, so it is left out of the corpus entirely.

The :func:`len <builtins.len>` function returns the number of items of an object you give it.
"""
PROSE = "\n\n".join(
    f"Paragraph {i} says that the {w} heads of a model read the previous token and the first "
    f"one, while the {w} layers add what they find to the residual stream of every position."
    for i, w in enumerate(["early", "middle", "late", "many", "few", "odd", "even", "other"])
)


def test_rest_sources_give_their_prose_and_nothing_else():
    found = list(rest_paragraphs(REST))
    assert found == [
        "Python is an easy to learn, powerful programming language. It has efficient "
        "high-level data structures and a simple but effective approach to object-oriented "
        "programming, as print shows:",
        "The len function returns the number of items of an object you give it.",
    ]


def test_texts_are_packed_within_the_budget_in_order(tmp_path):
    words = lambda text: len(text.split())  # noqa: E731 - a stand-in tokenizer
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    texts = list(sequences(paragraphs(str(source)), words, 60, limit=10))
    assert all(words(t) <= 60 for t in texts) and len(texts) >= 4
    assert " ".join(texts).split() == PROSE.split()  # nothing lost, nothing reordered
    assert len(list(sequences(paragraphs(str(source)), words, 60, limit=2))) == 2
    long = list(sequences(iter(["word " * 100]), words, 30, limit=5))
    assert long == [" ".join(["word"] * 30)]  # cut at a word boundary
    lines = tmp_path / "texts.jsonl"
    lines.write_text(json.dumps({"text": "One."}) + "\n" + json.dumps({"text": "Two."}) + "\n")
    assert list(paragraphs(str(lines))) == ["One.", "Two."]
    with pytest.raises(CorpusMissing, match="no corpus named"):
        list(paragraphs(str(tmp_path / "absent")))


@pytest.fixture()
def corpus_app(local_checkpoints, tmp_path):
    settings = make_settings(local_checkpoints, corpus_store=str(tmp_path / "corpus.sqlite"))
    return create_app(settings)


def test_a_text_is_described_as_the_explorer_describes_it(corpus_app):
    loaded = corpus_app.state.manager.get("local/qwen2-tiny")
    text = PROSE.split("\n\n")[0]
    found = describe_text(loaded, text)
    expected = statistics_of(loaded, run_forward(loaded, text))
    for i, name in enumerate(STATISTICS):
        torch.testing.assert_close(
            torch.from_numpy(found.stats[..., i]), expected.values[name], equal_nan=True
        )
    assert found.hist.shape == (2, 4, 12)
    np.testing.assert_allclose(found.hist.sum(-1), found.tokens, rtol=1e-5)  # rows sum to 1


def test_a_stopped_job_resumes_without_computing_a_text_again(corpus_app, tmp_path):
    loaded = corpus_app.state.manager.get("local/qwen2-tiny")
    source = tmp_path / "texts.txt"
    source.write_text(PROSE)
    store = Store(tmp_path / "corpus.sqlite")
    run = plan(store, loaded, str(source), 48, limit=5)
    assert run.planned >= 3 and run.done == 0
    calls = []
    run = run_job(loaded, store, run, should_stop=lambda: len(calls) >= 2,
                  progress=lambda done, planned, rate: calls.append(done), batch_size=1)  # fmt: skip
    assert run.done == 2 and len(store.pending(run.id)) == run.planned - 2
    again = plan(store, loaded, str(source), 48, limit=5)  # the same run, its texts kept
    assert again.id == run.id and again.done == 2
    seen = []
    run = run_job(loaded, store, again, progress=lambda done, planned, rate: seen.append(done))
    assert seen == list(range(3, run.planned + 1)) and run.done == run.planned
    idx, stats, _ = store.statistics(run)
    assert idx.tolist() == list(range(run.planned)) and stats.shape[1:] == (2, 4, 12)

    client = TestClient(corpus_app)
    runs = client.get("/api/corpus").json()["runs"]
    assert runs[0]["done"] == run.planned and runs[0]["model"] == "local/qwen2-tiny"
    heads = client.get(f"/api/corpus/{run.id}/heads").json()
    means = np.nanmean(stats[..., STATISTICS.index("previous")], axis=0)
    np.testing.assert_allclose(heads["statistics"]["previous"], means, rtol=1e-5)
    page = client.get(f"/api/corpus/{run.id}/heads/1/2?metric=previous&per_decile=1").json()
    assert page["metric"] == "previous" and page["texts"][0]["decile"] == 9
    values = [t["value"] for t in page["texts"]]
    assert values == sorted(values, reverse=True)
    assert abs(sum(page["distance"]) - 1) < 1e-6 and page["to_tokens"]
    assert sum(page["histograms"]["entropy"]["counts"]) == run.planned
    assert client.get(f"/api/corpus/{run.id + 1}/heads").status_code == 404
    bad = client.get(f"/api/corpus/{run.id}/heads/1/2?metric=nonsense")
    assert bad.status_code == 422 and "metric must be one of" in bad.json()["detail"]
    assert client.get(f"/api/corpus/{run.id}/heads/9/0").status_code == 422
