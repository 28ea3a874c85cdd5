"""POST /api/attention/circuit: edges between heads on one text and by edge attribution
patching, through HTTP: the focus head's inputs add up, the edges are its shares, known
answers on SmolLM2 (an induction head's key comes from a previous-token head; the IOI pair's
edges), and every refusal before any work."""

from __future__ import annotations

import pytest

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.circuit import CircuitResponse
from atlas_engine.schemas.trace import ANIMAL
from atlas_engine.schemas.writes import IOI_CLEAN, IOI_CORRUPTED
from tests.support.float32_json import assert_answer_is

pytestmark = pytest.mark.slow

COPY = "local/copy-previous"
REPEATED = (
    "Listen: violet engine copper hollow maple signal drift canyon. violet engine copper hollow "
    "maple signal drift canyon."
)


def circuit(client, **body) -> dict:
    return assert_answer_is(CircuitResponse, client.post("/api/attention/circuit", json=body))


def test_a_focus_heads_inputs_add_up_and_are_its_edges(client):
    answer = circuit(client, model=MINILM_ID, text=ANIMAL, focus={"layer": 3, "head": 1}, top=1000)
    focus = answer["focus"]
    for k in range(3):
        parts = sum(map(sum, focus["heads"][k])) + sum(focus["mlps"][k])
        parts += sum(focus["embeddings"][k]) + focus["bias"][k]
        assert parts == pytest.approx(focus["totals"][k], abs=1e-4)
    assert focus["totals"][2] == pytest.approx(1.0, abs=1e-5)
    into = [e for e in answer["edges"] if (e["to_layer"], e["to_head"]) == (3, 1)]
    for edge in into:
        k = "qkv".index(edge["input"])
        assert edge["value"] == pytest.approx(
            focus["heads"][k][edge["from_layer"]][edge["from_head"]], rel=1e-5, abs=1e-7
        )
    assert answer["edge_count"] == 3 * 12 * 12 * (6 * 5 // 2)


def test_smollm2s_induction_head_takes_its_keys_from_a_previous_token_head(client):
    """On a repeated text, the induction head L18 H6's key-side edges: the strongest comes from
    an earlier head (L16 H0 on this text, the head the trace of one score names too)."""
    answer = circuit(client, model=SMOLLM2_ID, text=REPEATED, inputs=["k"], top=1000)
    into = [e for e in answer["edges"] if (e["to_layer"], e["to_head"]) == (18, 6)]
    best = max(into, key=lambda e: abs(e["value"]))
    assert (best["from_layer"], best["from_head"]) == (16, 0) and best["value"] > 0


def test_edge_attribution_patching_on_the_ioi_pair(client):
    answer = circuit(
        client, model=SMOLLM2_ID, text=IOI_CLEAN, by="edges", corrupted=IOI_CORRUPTED,
        target={"text": " Mary"}, contrast={"text": " John"}, top=20,
    )  # fmt: skip
    metric = answer["metric"]
    assert metric["clean"] > 0 > metric["corrupted"]
    assert len(answer["edges"]) == 20 and abs(answer["edges"][0]["value"]) == answer["largest"]
    values = [abs(e["value"]) for e in answer["edges"]]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"by": "edges"}, "send `corrupted`"),
        ({"corrupted": " red green sun cat dog"}, "belong to by=edges"),
        ({"focus": {"layer": 4, "head": 0}}, "layer"),
        ({"by": "edges", "corrupted": " red green", "focus": None}, "must line up"),
    ],
)
def test_bad_circuits_are_refused_with_a_reason(client, change, message):
    body = {"model": COPY, "text": " red green blue cat dog", **change}
    response = client.post("/api/attention/circuit", json=body)
    assert response.status_code == 422 and message in response.text, response.text


def test_a_post_norm_model_has_no_edge_patching(client):
    body = {"model": MINILM_ID, "text": ANIMAL, "by": "edges", "corrupted": ANIMAL}
    response = client.post("/api/attention/circuit", json=body)
    assert response.status_code == 422


def test_from_the_weights_the_induction_heads_keys_compose_with_the_previous_token_head(client):
    """By the weights alone (K-composition less random heads'), L18 H6's strongest key edges
    come from L17 H8 and L16 H0, the head the text's trace names."""
    answer = circuit(client, model=SMOLLM2_ID, text="a", by="weights", inputs=["k"], top=1000)
    into = sorted(
        (e for e in answer["edges"] if (e["to_layer"], e["to_head"]) == (18, 6)),
        key=lambda e: -e["value"],
    )
    assert {(e["from_layer"], e["from_head"]) for e in into[:2]} == {(17, 8), (16, 0)}
    assert answer["metric"]["baseline"]["k"] == pytest.approx(576**-0.5, rel=0.05)
