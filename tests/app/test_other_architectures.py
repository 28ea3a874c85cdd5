"""Architectures outside the three families: Mistral and Qwen2 share Llama's layout and are
replayed; GPT-NeoX and T5 have no adapter, so the server shows their maps (T5: its encoder's),
tells causal from the maps themselves, and says which views need a known family."""

import pytest
import torch

from app.models.registry import REPLAY_FAMILIES

TEXT = "Every token looks back at the ones before it."
pytestmark = pytest.mark.slow


def listed(client) -> dict[str, dict]:
    return {m["id"]: m for m in client.get("/api/models").json()["models"]}


def test_the_model_list_says_what_each_architecture_allows(client):
    models = listed(client)
    for model_id in ("local/qwen2-tiny", "local/mistral-tiny"):
        assert (models[model_id]["family"], models[model_id]["replay"]) == ("llama", True)
    assert models["local/mistral-tiny"]["max_tokens"] == 48  # its sliding window
    for model_id in ("local/neox-tiny", "local/t5-tiny"):
        assert (models[model_id]["family"], models[model_id]["replay"]) == ("other", False)


@pytest.mark.parametrize(
    ("model_id", "causal"), [("local/neox-tiny", True), ("local/t5-tiny", False)]
)
def test_maps_of_an_unadapted_architecture_are_the_models_own(client, app, model_id, causal):
    response = client.post("/api/attention", json={"model": model_id, "text": TEXT})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["causal"] is causal and listed(client)[model_id]["causal"] is causal
    loaded = app.state.manager.get(model_id)
    enc = loaded.tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = loaded.model(input_ids=enc["input_ids"], output_attentions=True)
    assert torch.equal(
        torch.tensor(body["attentions"]), torch.stack([a[0] for a in out.attentions])
    )


@pytest.mark.parametrize("model_id", ["local/neox-tiny", "local/t5-tiny"])
def test_views_that_replay_say_they_need_a_known_family(client, model_id):
    replaying = {
        "/api/attention/detail": {"layer": 0, "head": 0},
        "/api/lab/sparse": {"layer": 0, "head": 0},
    }
    for route, extra in replaying.items():
        response = client.post(route, json={"model": model_id, "text": TEXT, **extra})
        assert response.status_code == 422, (route, response.text)
        assert REPLAY_FAMILIES in response.json()["detail"]
    stats = client.post("/api/attention/heads", json={"model": model_id, "text": TEXT})
    assert stats.status_code == 200, stats.text  # analyses of the maps work for any model
