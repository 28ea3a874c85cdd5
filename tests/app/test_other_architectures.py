"""Architectures beyond the embedded models: every model whose attention goes through
transformers' attention interface is replayed by the capture path (GPT-NeoX and T5's encoder
here, with no code of theirs in Atlas); a model outside it (GPT-Neo) keeps its own maps and
says why the views that replay a head are not open to it."""

import pytest
import torch

TEXT = "Every token looks back at the ones before it."
pytestmark = pytest.mark.slow


def listed(client) -> dict[str, dict]:
    return {m["id"]: m for m in client.get("/api/models").json()["models"]}


def test_the_model_list_says_what_each_architecture_allows(client):
    models = listed(client)
    for model_id in ("local/qwen2-tiny", "local/mistral-tiny"):
        assert (models[model_id]["family"], models[model_id]["replay"]) == ("llama", True)
    assert models["local/mistral-tiny"]["max_tokens"] == 256  # its window (48) is in its mask
    for model_id in ("local/neox-tiny", "local/t5-tiny"):
        assert (models[model_id]["family"], models[model_id]["replay"]) == ("other", True)
        assert models[model_id]["replay_refusal"] is None
    outside = models["local/gptneo-tiny"]
    assert (outside["family"], outside["replay"]) == ("other", False)
    assert "outside transformers' attention interface" in outside["replay_refusal"]


@pytest.mark.parametrize(
    ("model_id", "causal"),
    [("local/neox-tiny", True), ("local/t5-tiny", False), ("local/gptneo-tiny", True)],
)
def test_maps_of_every_architecture_are_the_models_own(client, app, model_id, causal):
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
def test_a_head_of_an_architecture_atlas_has_no_code_for_replays_exactly(client, model_id):
    body = {"model": model_id, "text": TEXT, "layer": 1, "head": 2}
    response = client.post("/api/attention/detail", json=body)
    assert response.status_code == 200, response.text
    detail = response.json()
    assert detail["replay_max_abs_diff"] == 0.0
    assert detail["position_bias"] is (model_id == "local/t5-tiny")
    weights = torch.tensor(detail["weights"])
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[0]))


def test_a_model_outside_the_interface_keeps_its_maps_and_says_why_it_is_not_replayed(client):
    replaying = {
        "/api/attention/detail": {"layer": 0, "head": 0},
        "/api/attention/qkspace": {"layer": 0},
        "/api/attention/ablate": {"heads": [{"layer": 0, "head": 0}]},
    }
    for route, extra in replaying.items():
        response = client.post(route, json={"model": "local/gptneo-tiny", "text": TEXT, **extra})
        assert response.status_code == 422, (route, response.text)
        detail = response.json()["detail"]
        assert "cannot replay a head" in detail and "GPTNeoModel" in detail
    stats = client.post("/api/attention/heads", json={"model": "local/gptneo-tiny", "text": TEXT})
    assert stats.status_code == 200, stats.text  # analyses of the maps work for any model


def test_a_sliding_windows_entropy_is_normalised_by_the_keys_it_may_read(client):
    """Mistral's window (48 keys, in its mask) on 120 tokens: a row past the window reads 48
    keys, not all before it, and its entropy is normalised by log 48."""
    text = " ".join(f"word{i % 37}" for i in range(60))
    body = {"model": "local/mistral-tiny", "text": text}
    stats = client.post("/api/attention/heads", json=body).json()
    maps = client.post("/api/attention", json={**body, "layers": [0]}).json()["attentions"][0]
    maps = torch.tensor(maps, dtype=torch.float64)  # (H, T, T)
    seq = maps.shape[-1]
    assert seq > 60
    visible = torch.arange(1, seq + 1).clamp(max=48)
    assert bool(((maps > 0).sum(-1) == visible).all())  # the window, as the model masks it
    terms = torch.where(maps > 0, -maps * maps.log(), torch.zeros(()))
    normalised = (terms.sum(-1)[:, 1:] / visible[1:].log()).mean(-1)  # rows that see > 1 key
    got = torch.tensor(stats["statistics"]["entropy"][0], dtype=torch.float64)
    torch.testing.assert_close(got, normalised, atol=1e-5, rtol=0)
