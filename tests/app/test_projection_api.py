"""POST /api/corpus/{run}/heads/{layer}/{head}/projection: a head's queries, keys, values and
outputs over a sample of a run's tokens, sized by its token budget, projected exactly as the
engine's own functions do on the model's own passes; bad requests are 4xx naming the fault."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.corpus.job import plan, run_job
from atlas_engine.corpus.store import Store
from atlas_engine.inference.forward import run_forward
from atlas_engine.schemas.projection import MAX_PROJECTION_TOKENS
from atlas_engine.services.projection import head_vectors
from attention_core.qkspace import pca_2d, qk_space
from tests.atlas_engine.corpus.test_headvis_tree import MODEL, PROSE
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(local_checkpoints, tmp_path_factory):
    """A client on a store with one described run of a tiny GQA decoder (qwen2: 4 query heads,
    2 key/value heads)."""
    tmp = tmp_path_factory.mktemp("projection-api")
    path = tmp / "corpus.sqlite"
    app = create_app(make_settings(local_checkpoints, corpus_store=str(path)))
    loaded = app.state.manager.get(MODEL)
    (tmp / "texts.txt").write_text(PROSE)
    store = Store(path)
    run = run_job(loaded, store, plan(store, loaded, str(tmp / "texts.txt"), 48, limit=20))
    store.close()
    return TestClient(app), run, loaded


def url(run_id, layer=1, head=3):
    return f"/api/corpus/{run_id}/heads/{layer}/{head}/projection"


def test_the_points_are_the_heads_own_vectors_projected(served):
    client, run, loaded = served
    answer = client.post(url(run.id), json={"tokens": 100, "seed": 1})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    n = len(body["token"])
    assert n == 100 == sum(t["tokens"] for t in body["texts"])  # the budget, exactly
    assert body["kv_head"] == 1 and body["method"] == "pca"
    for field in ("text", "position", "special", "received", "entropy"):
        assert len(body[field]) == n
    q, k, v, o, received = [], [], [], [], []
    for item in body["texts"]:
        vectors = head_vectors(loaded, run_forward(loaded, item["text"]), 1, 3)
        keep = item["tokens"]
        q.append(vectors.q[:keep])
        k.append(vectors.k[:keep])
        v.append(vectors.v[:keep])
        o.append(vectors.o[:keep])
        received.append(vectors.weights.sum(0)[:keep])
    space = qk_space(torch.cat(q), torch.cat(k))
    torch.testing.assert_close(torch.tensor(body["queries"]), space.queries, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(body["keys"]), space.keys, atol=1e-5, rtol=0)
    assert body["query_key"]["explained"] == pytest.approx(list(space.explained), abs=1e-6)
    for name, plane, points in (("values", "value_plane", v), ("outputs", "output_plane", o)):
        coords, explained = pca_2d(torch.cat(points))
        torch.testing.assert_close(torch.tensor(body[name]), coords, atol=1e-5, rtol=0)
        assert body[plane]["explained"] == pytest.approx(list(explained), abs=1e-6)
    torch.testing.assert_close(torch.tensor(body["received"]), torch.cat(received))
    assert body["position"][: body["texts"][0]["tokens"]] == list(range(body["texts"][0]["tokens"]))


def test_headvis_activations_are_the_rows_maxima_and_the_jobs_own_max_activation(served):
    """Each point's activation is its row's largest weight off column 0 (null at position 0);
    each text's max_activation is what the corpus job kept, which is the largest of its rows'."""
    client, run, loaded = served
    body = client.post(url(run.id, 0, 1), json={"tokens": 120, "seed": 2}).json()
    at = 0
    for item in body["texts"]:
        weights = head_vectors(loaded, run_forward(loaded, item["text"]), 0, 1).weights
        keep = item["tokens"]
        got = body["activation"][at : at + keep]
        assert got[0] is None
        torch.testing.assert_close(torch.tensor(got[1:]), weights[1:keep, 1:].amax(-1))
        whole = weights[1:, 1:].max().item()  # the job described the whole text, batched
        assert item["max_activation"] == pytest.approx(whole, abs=1e-6)
        at += keep
    assert at == len(body["activation"])
    shown = {t["idx"]: t["max_activation"] for t in body["texts"]}
    store = Store(Path(client.app.state.settings.corpus_store))
    try:
        kept = store.max_activations(
            run, list(shown), 0, 1
        )  # float32, shown in its shortest digits
        assert {i: np.float32(v) for i, v in kept.items()} == {
            i: np.float32(v) for i, v in shown.items()
        }
    finally:
        store.close()


def test_the_same_seed_draws_the_same_sample_and_another_another(served):
    client, run, _ = served
    texts = [
        [t["idx"] for t in client.post(url(run.id), json={"tokens": 60, "seed": s}).json()["texts"]]
        for s in (0, 0, 5)
    ]
    assert texts[0] == texts[1] != texts[2]


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        (url(999), {}, 404, "no corpus run 999"),
        (url(1, layer=7), {}, 422, "layer 7 head 3 is not in"),
        (url(1, head=9), {}, 422, "head 9 is not in"),
        (url(1), {"tokens": MAX_PROJECTION_TOKENS + 1}, 422, "less than or equal to 2048"),
        (url(1), {"tokens": 8}, 422, "greater than or equal to 16"),
        (url(1), {"tokens": "64"}, 422, "integer"),
        (url(1), {"method": "tsne"}, 422, "'pca' or 'umap'"),
        (url(1), {"colour": "token"}, 422, "colour: unknown field"),
    ],
)
def test_bad_requests_are_refused_saying_why(served, path, body, status, says):
    client, run, _ = served
    assert run.id == 1
    answer = client.post(path, json=body)
    assert answer.status_code == status, answer.text
    assert says in answer.text


def test_umap_where_not_installed_is_a_422_that_says_use_pca(served):
    client, run, _ = served
    answer = client.post(url(run.id), json={"method": "umap"})
    try:
        import umap  # noqa: F401
    except ImportError:
        assert answer.status_code == 422 and "use method 'pca'" in answer.text
    else:
        assert answer.status_code == 200 and answer.json()["query_key"]["explained"] is None
