"""POST /api/attention/composition: every pair of heads' Q-, K- and V-composition from the
weights, through HTTP: the edges are the pairs most above their baseline and agree with the
focus head's full scores, SmolLM2's GQA heads are scored, and bad requests are refused."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.inference import head_weights
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.composition import CompositionResponse, CompositionStatus
from tests.conftest import make_settings
from tests.support.float32_json import assert_answer_is

pytestmark = pytest.mark.slow


def composition(client, **body) -> dict:
    return assert_answer_is(
        CompositionResponse, client.post("/api/attention/composition", json=body)
    )


def test_the_edges_are_the_pairs_most_above_the_baseline(client):
    answer = composition(client, model=MINILM_ID, top=50, focus={"layer": 3, "head": 1})
    assert answer["kinds"] == ["q", "k", "v"] and (answer["layers"], answer["heads"]) == (6, 12)
    excess = [e["excess"] for e in answer["edges"]]
    for e in answer["edges"]:
        assert e["excess"] == pytest.approx(e["score"] - e["baseline"], abs=1e-6)
    assert len(excess) == 50 and excess == sorted(excess, reverse=True) and excess[-1] > 0
    assert all(e["from_layer"] < e["to_layer"] for e in answer["edges"])
    for summary in answer["summary"]:
        assert summary["pairs"] == 12 * 12 * (6 * 5 // 2)
        assert 0 < summary["baseline"] < summary["largest"] <= 1
        assert summary["largest"] - summary["baseline"] >= excess[-1] or summary["above"] == 0
    focus = answer["focus"]
    assert [len(rows) for rows in focus["scores"]] == [3, 3, 3]
    for e in answer["edges"]:
        if (e["to_layer"], e["to_head"]) == (3, 1):
            k = answer["kinds"].index(e["kind"])
            got = focus["scores"][k][e["from_layer"]][e["from_head"]]
            assert got == pytest.approx(e["score"], rel=1e-6)
    again = composition(client, model=MINILM_ID, kind="v", top=5)
    assert again["kinds"] == ["v"] and again["seconds"] == answer["seconds"]  # computed once
    assert again["edges"] == [e for e in answer["edges"] if e["kind"] == "v"][:5]


def test_smollm2s_grouped_heads_are_scored_in_every_pair(client):
    answer = composition(client, model=SMOLLM2_ID, kind="k", top=2000)
    assert (answer["layers"], answer["heads"], answer["kv_heads"]) == (30, 9, 3)
    (summary,) = answer["summary"]
    assert summary["pairs"] == 81 * (30 * 29 // 2)
    assert summary["baseline"] == pytest.approx(0.0417, abs=5e-4)  # about 1 / √576
    assert len(answer["edges"]) == min(2000, summary["above"])


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"model": MINILM_ID, "focus": {"layer": 0, "head": 0}}, 422, "no earlier heads"),
        ({"model": MINILM_ID, "focus": {"layer": 6, "head": 0}}, 422, "layer"),
        ({"model": MINILM_ID, "top": 0}, 422, "top"),
        ({"model": MINILM_ID, "kind": "o"}, 422, "kind"),
        ({"model": MINILM_ID, "text": "a"}, 422, "text"),
        ({"model": "no/such-model"}, 404, "no/such-model"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(client, body, status, message):
    response = client.post("/api/attention/composition", json=body)
    assert response.status_code == status and message in response.text, response.text


def test_the_status_route_follows_the_scores_from_not_computed_to_ready(
    local_checkpoints, monkeypatch
):
    """GET /api/models/{id}/composition: not computed before a load and before a request,
    each stage with a rising share while a request computes (read from inside the work, as a
    page polling it would), ready after; an unknown id is a 404."""
    model = "local/qwen2-tiny"
    client = TestClient(create_app(make_settings(local_checkpoints)))
    status = lambda: assert_answer_is(  # noqa: E731
        CompositionStatus, client.get(f"/api/models/{model}/composition")
    )
    assert status()["stage"] == "the model is not loaded"
    assert client.post(f"/api/models/{model}/load").status_code == 202
    client.app.state.manager.get(model)  # waits for the load
    assert (status()["state"], status()["fraction"]) == ("not computed", 0.0)
    seen = []
    reporter = head_weights._reporter

    def recording(loaded, stage):
        report = reporter(loaded, stage)

        def both(fraction):
            report(fraction)
            seen.append(status())

        seen.append(status())
        return both

    monkeypatch.setattr(head_weights, "_reporter", recording)
    composition(client, model=model, top=5)
    assert {s["state"] for s in seen} == {"computing"}
    stages = [name for name, _ in head_weights.STAGES]
    assert [s["stage"] for s in seen] == sorted((s["stage"] for s in seen), key=stages.index)
    assert set(stages) <= {s["stage"] for s in seen}
    fractions = [s["fraction"] for s in seen]
    assert (
        fractions == sorted(fractions)
        and fractions[0] == 0.0
        and fractions[-1] == pytest.approx(0.9)
    )
    assert status() == {"model": model, "state": "ready", "stage": "computed", "fraction": 1.0}
    assert client.get("/api/models/local/none/composition").status_code == 404
