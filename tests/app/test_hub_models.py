"""Hub ids load through the ordinary from_pretrained(id) path from a HuggingFace cache.

No Hub is reachable here, so the test lays out a real cache (models--distilgpt2/snapshots/...)
holding a small random GPT-2 checkpoint with the real GPT-2 tokenizer, and points
huggingface_hub at it. The registry entry and the loading code are the ones production uses.
"""

import shutil

import huggingface_hub.constants
import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from tests.conftest import make_settings


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, local_checkpoints):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--distilgpt2"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(local_checkpoints["local/gpt2-tiny"], snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    return snapshot


def test_cached_hub_model_is_listed_and_served(hub_cache, local_checkpoints):
    client = TestClient(create_app(make_settings(local_checkpoints)))
    models = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    assert models["distilgpt2"]["available"] is True
    assert (models["distilgpt2"]["num_layers"], models["distilgpt2"]["num_heads"]) == (2, 4)
    assert models["gpt2"]["available"] is False  # not in this cache
    body = client.post(
        "/api/attention", json={"model": "distilgpt2", "text": "Hello big world"}
    ).json()
    assert body["tokens"] == ["Hello", "␣big", "␣world"] and body["causal"] is True
    loaded = client.app.state.manager.get("distilgpt2")
    enc = loaded.tokenizer("Hello big world", return_tensors="pt")
    with torch.no_grad():
        direct = loaded.model(**enc, output_attentions=True).attentions
    served, expected = torch.tensor(body["attentions"]), torch.stack([a[0] for a in direct])
    assert (served - expected).abs().max() <= 1e-5  # replayed on demand, within the bound


def test_a_hub_model_cached_without_its_weights_is_listed_unavailable(hub_cache, local_checkpoints):
    (hub_cache / "model.safetensors").unlink()  # a download cut short, or config.json alone
    client = TestClient(create_app(make_settings(local_checkpoints)))
    model = {m["id"]: m for m in client.get("/api/models").json()["models"]}["distilgpt2"]
    assert model["available"] is False
    assert model["unavailable_reason"].startswith(
        "the weights of 'distilgpt2' are not in the local HuggingFace cache"
    )
    assert "huggingface-cli download distilgpt2" in model["unavailable_reason"]


def test_uncached_hub_model_is_503_with_the_fix(local_checkpoints, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    client = TestClient(create_app(make_settings(local_checkpoints)))
    response = client.post("/api/attention", json={"model": "distilgpt2", "text": "hi"})
    assert response.status_code == 503
    assert "huggingface-cli download distilgpt2" in response.json()["detail"]


def test_hub_downloads_setting_and_offline_mode(local_checkpoints, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))

    def gpt2_available(**overrides):
        client = TestClient(create_app(make_settings(local_checkpoints, **overrides)))
        return {m["id"]: m for m in client.get("/api/models").json()["models"]}["gpt2"]["available"]

    assert gpt2_available(hub_downloads=True) is False  # HF_HUB_OFFLINE=1 wins (set by the tests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert gpt2_available(hub_downloads=False) is False
    assert gpt2_available(hub_downloads=True) is True  # would download on first use
