"""Gemma 3 270M, the opt-in third real model (`make gemma`; `make test` installs it and sets
ATLAS_REQUIRE_GEMMA=1, so a missing install fails here instead of skipping): MQA (4 query heads,
1 key/value head), sliding-window and global layers, q/k norms, a head of its own size (256),
all replayed by the capture path with no code of Gemma's in Atlas, bit for bit."""

import os

import pytest
import torch

from atlas_engine.models.capture import implementation
from atlas_engine.models.registry import GEMMA3_ID
from atlas_engine.models.sources import GEMMA3, _part_paths

pytestmark = pytest.mark.slow

if _part_paths(GEMMA3) is None:
    if os.environ.get("ATLAS_REQUIRE_GEMMA") == "1":
        raise RuntimeError("Gemma 3 270M is not installed: run `make gemma GEMMA_TERMS=accept`")
    pytest.skip("Gemma 3 270M is opt-in (`make gemma`)", allow_module_level=True)

TEXT = "The Eiffel Tower is in the city of Paris, and the Colosseum is in the city of Rome."


def own_maps(loaded, text: str) -> tuple[torch.Tensor, ...]:
    """transformers' own eager maps, (1, H, T, T) per layer."""
    encoding = loaded.tokenizer(text, return_tensors="pt")
    with torch.inference_mode(), implementation(loaded.model, "eager"):
        return loaded.model(input_ids=encoding["input_ids"], output_attentions=True).attentions


def test_the_model_list_describes_gemma(client):
    models = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    client.post("/api/attention", json={"model": GEMMA3_ID, "text": "Hi", "layers": [0]})
    gemma = {m["id"]: m for m in client.get("/api/models").json()["models"]}[GEMMA3_ID]
    assert models[GEMMA3_ID]["available"]
    assert (gemma["replay"], gemma["predicts"], gemma["causal"]) == (True, "next_token", True)
    assert (gemma["num_layers"], gemma["num_heads"], gemma["num_kv_heads"]) == (18, 4, 1)
    assert gemma["head_dim"] == 256 and gemma["max_tokens"] == 8192


def test_every_map_and_a_heads_replay_equal_transformers_bit_for_bit(client, app):
    response = client.post("/api/attention", json={"model": GEMMA3_ID, "text": TEXT})
    assert response.status_code == 200, response.text
    shown = torch.tensor(response.json()["attentions"])  # (L, H, T, T)
    loaded = app.state.manager.get(GEMMA3_ID)
    expected = torch.stack([layer[0] for layer in own_maps(loaded, TEXT)])
    assert torch.equal(shown, expected)
    for layer in (0, 5):  # a sliding layer and a global one
        body = {"model": GEMMA3_ID, "text": TEXT, "layer": layer, "head": 3, "query": 4}
        detail = client.post("/api/attention/detail", json=body).json()
        assert detail["replay_max_abs_diff"] == 0.0 and detail["kv_head"] == 0
        assert detail["model_scale"] == pytest.approx(256**-0.5)  # query_pre_attn_scalar 256
        assert torch.equal(torch.tensor(detail["weights"]), expected[layer, 3])


def test_gemma_predicts_paris(client):
    text = "The Eiffel Tower is in the city of"
    response = client.post(
        "/api/attention/predictions", json={"model": GEMMA3_ID, "text": text, "top_k": 3}
    )
    assert response.status_code == 200, response.text
    last = response.json()["positions"][-1]
    assert last["candidates"][0]["token"].strip("␣ ") == "Paris"


def test_what_heads_write_on_gemma_adds_up(client):
    """Gemma 3 normalises each attention's output before the residual adds it: the direct
    attributions freeze that norm too, and still sum to the model's own logit."""
    text = "The Eiffel Tower is in the city of"
    body = {"model": GEMMA3_ID, "text": text, "source": {"layer": 17, "head": 0}}
    answer = client.post("/api/attention/attribution", json=body)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["target"]["token"].strip("␣ ") == "Paris"
    assert found["total"] == pytest.approx(found["logit"], abs=2e-6 * max(1, abs(found["logit"])))
    assert sum(found["source"]["values"]) == pytest.approx(found["heads"][17][0], abs=1e-5)
    lens = client.post("/api/attention/lens", json={"model": GEMMA3_ID, "text": text, "top_k": 1})
    assert lens.status_code == 200 and lens.json()["final_norm"] == "Gemma3RMSNorm"
    assert lens.json()["top"][-1][-1][0]["token"].strip("␣ ") == "Paris"
