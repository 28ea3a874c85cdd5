"""HeadVis's numbers through the API (GET /api/corpus/{run}/heads and .../headvis): a run the
job described and the same run imported from its tree answer the same head files and metrics;
an imported run says what it lacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.corpus.headvis_tree import import_tree, read_folder, tree_files
from atlas_engine.corpus.job import plan, run_job
from atlas_engine.corpus.store import Store
from attention_core import headvis
from tests.atlas_engine.corpus.test_headvis_tree import MODEL, PROSE
from tests.conftest import make_settings
from tests.support.headvis import write_example_tree

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(local_checkpoints, tmp_path_factory):
    """A client on a store with a described run and its imported tree."""
    tmp = tmp_path_factory.mktemp("headvis-api")
    path = tmp / "corpus.sqlite"
    app = create_app(make_settings(local_checkpoints, corpus_store=str(path)))
    loaded = app.state.manager.get(MODEL)
    (tmp / "texts.txt").write_text(PROSE)
    store = Store(path)
    run = run_job(loaded, store, plan(store, loaded, str(tmp / "texts.txt"), 48, limit=20))
    files = tree_files(store, run)
    imported = import_tree(store, {k: v.encode() for k, v in files.items()})
    store.close()
    return TestClient(app), run, imported, files


def test_a_heads_file_reads_the_same_described_or_imported(served):
    client, run, imported, files = served
    scatter = {(r["layer"], r["head"]): r for r in json.loads(files["scatter_data.json"])}
    for layer, head in ((0, 0), (1, 3)):
        expected = json.loads(files[f"heads/L{layer}H{head}.json"])
        for rid in (run.id, imported.id):
            got = client.get(f"/api/corpus/{rid}/heads/{layer}/{head}/headvis")
            assert got.status_code == 200, got.text
            body = got.json()
            texts = [s.pop("text") for s in body["sequences"]]
            assert all(texts) if rid == run.id else not any(texts)
            assert body["sequences"] == expected["sequences"]
            assert body["top_key_tokens"] == expected["top_key_tokens"]
            assert body["histogram"] == expected["histogram"]
            assert body["n_samples"] == len(expected["sequences"]) > 0
            for name in headvis.METRICS:
                assert body["metrics"][name] == scatter[(layer, head)][name]


def test_the_scatter_has_headvis_metrics_beside_atlas_statistics(served):
    client, run, imported, files = served
    native = client.get(f"/api/corpus/{run.id}/heads").json()
    other = client.get(f"/api/corpus/{imported.id}/heads").json()
    assert native["headvis"] == other["headvis"] == list(headvis.METRICS)
    assert "previous" in native["statistics"] and "previous" not in other["statistics"]
    assert other["run"]["source"] == "headvis" and other["run"]["statistics"] == []
    for name in headvis.METRICS:
        assert native["statistics"][name] == other["statistics"][name]
    row = json.loads(files["scatter_data.json"])[5]
    assert (
        native["statistics"]["induction_score"][row["layer"]][row["head"]] == row["induction_score"]
    )


def test_an_imported_run_says_what_it_lacks(served):
    client, _, imported, _ = served
    answer = client.get(f"/api/corpus/{imported.id}/heads/0/0")
    assert answer.status_code == 422 and "imported from a HeadVis tree" in answer.text
    assert client.get(f"/api/corpus/{imported.id}/heads/9/0/headvis").status_code == 422
    assert client.get(f"/api/corpus/{imported.id + 7}/heads/0/0/headvis").status_code == 404


def test_the_specs_example_shows_its_own_numbers(served, tmp_path):
    client, *_ = served
    example = write_example_tree(tmp_path / "example")
    store = Store(Path(client.app.state.settings.corpus_store))
    run = import_tree(store, read_folder(example))
    store.close()
    heads = client.get(f"/api/corpus/{run.id}/heads").json()
    assert heads["statistics"]["prev_token_score"] == [[0.7891, 0.2969], [0.3125, 0.0625]]
    assert heads["statistics"]["induction_score"][1][0] == 0.7083
    head = client.get(f"/api/corpus/{run.id}/heads/0/0/headvis").json()
    assert head["metrics"]["qk_distance_variance"] == 0.5594
    assert [s["sequence_id"] for s in head["sequences"]] == [0, 1]
    assert head["sequences"][1]["attention_values"][:2] == [1.0, 0.875]
    assert head["qk_distance_histogram"]["bin_values"][:4] == [2.75, 6.3125, 0.75, 0.125]
    assert head["top_query_tokens"][0] == {"token": " a", "weight": 3.0}
    assert head["mean_max_activation"] == 0.8125 and head["causal"] is True
