"""POST /api/attention/compare. Known by construction: the two maps are transformers' own; for a
causal model, two texts that differ first at position i have identical rows before i."""

import numpy as np
import pytest
import torch

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.compare import CompareResponse, SideMap
from tests.support.float32_json import assert_answer_is, assert_float32_numbers

pytestmark = pytest.mark.slow


def post(client, **body) -> dict:
    """The answer, held to CompareResponse with every weight a float32's shortest decimal."""
    answer = assert_answer_is(CompareResponse, client.post("/api/attention/compare", json=body))
    for name in ("difference", "row_distance"):
        if answer[name] is not None:
            assert_float32_numbers(answer[name])
    for side in ("a", "b"):
        assert list(answer[side]) == list(SideMap.model_fields)
        assert_float32_numbers(answer[side]["weights"])
    return answer


def maps(client, model_id: str, text: str, layer: int) -> np.ndarray:
    body = {"model": model_id, "text": text, "layers": [layer], "format": "json"}
    return np.array(client.post("/api/attention", json=body).json()["attentions"][0], np.float32)


def test_two_heads_of_one_run(client):
    text = "The animal didn't cross the street because it was too tired."
    answer = post(
        client, model=SMOLLM2_ID, text=text, layer=3, head=0, other={"layer": 20, "head": 5}
    )
    assert answer["aligned"] and answer["differing_tokens"] == []
    a = np.array(answer["a"]["weights"], np.float32)
    b = np.array(answer["b"]["weights"], np.float32)
    assert np.array_equal(a, maps(client, SMOLLM2_ID, text, 3)[0])
    assert np.array_equal(b, maps(client, SMOLLM2_ID, text, 20)[5])
    assert np.allclose(np.array(answer["difference"]), b - a, atol=1e-7)
    rows = 0.5 * np.abs(b - a).sum(-1)
    assert np.allclose(answer["row_distance"], rows, atol=1e-6)
    assert answer["mean_row_distance"] == pytest.approx(rows.mean(), abs=1e-6)
    assert answer["max_abs_difference"] == pytest.approx(np.abs(b - a).max(), abs=1e-7)


def test_two_inputs_differ_only_from_the_changed_token_on_in_a_decoder(client):
    answer = post(
        client,
        model=SMOLLM2_ID,
        text="The cat sat on the mat and slept.",
        layer=5,
        head=1,
        other={"text": "The dog sat on the mat and slept.", "layer": 5, "head": 1},
    )
    assert answer["aligned"] and answer["differing_tokens"] == [1]
    rows = np.array(answer["row_distance"])
    assert rows[0] == 0 and (rows[1:] > 0).all()
    assert answer["b"]["text"] == "The dog sat on the mat and slept."


def test_two_models_line_up_only_where_their_tokenisers_agree(client):
    same = post(
        client,
        model="local/gpt2-tiny",
        text="one two three four",
        layer=0,
        head=0,
        other={"model": "local/gpt2-inverse-layer", "layer": 0, "head": 0},
    )
    assert same["aligned"] and same["a"]["tokens"] == same["b"]["tokens"]
    assert same["b"]["model"] == "local/gpt2-inverse-layer"
    apart = post(
        client,
        model=MINILM_ID,
        text="Tokenisers disagree.",
        layer=0,
        head=0,
        other={"model": SMOLLM2_ID, "layer": 0, "head": 0},
    )
    assert not apart["aligned"] and apart["difference"] is None
    assert "tokens" in apart["alignment"] or "tokenisers" in apart["alignment"]
    torch.testing.assert_close(
        torch.tensor(apart["b"]["weights"]),
        torch.tensor(maps(client, SMOLLM2_ID, "Tokenisers disagree.", 0)[0]),
    )


def test_refusals_name_the_side(client):
    response = client.post(
        "/api/attention/compare",
        json={
            "model": MINILM_ID,
            "text": "a b",
            "layer": 0,
            "head": 0,
            "other": {"layer": 9, "head": 0},
        },
    )
    assert response.status_code == 422 and "layer [9] out of range" in response.text
    response = client.post(
        "/api/attention/compare",
        json={
            "model": MINILM_ID,
            "text": "a b",
            "layer": 0,
            "head": 0,
            "other": {"text": "   ", "layer": 0, "head": 0},
        },
    )
    assert response.status_code == 422 and "other.text is empty" in response.text
