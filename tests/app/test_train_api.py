"""POST /api/lab/train: a short training streamed as NDJSON, its checkpoint saved and opened with
transformers (its maps on the probe equal the last snapshot's), bad knobs 422, a stop ends the
run, and a run past the cap 503."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
import torch
from fastapi.testclient import TestClient
from transformers import AutoTokenizer, GPT2LMHeadModel

from app.main import create_app
from atlas_engine.schemas.training import TrainRequest
from atlas_engine.services import training as service
from attention_core.training import TrainConfig, probe_batches
from tests.conftest import make_settings
from tests.support.ndjson import checked_lines

SMALL = {"layers": 2, "heads": 2, "d_model": 16, "vocab": 8, "half": 4, "batch": 8}


@pytest.fixture(scope="module")
def served(local_checkpoints, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    app = create_app(make_settings(local_checkpoints, trained_dir=str(folder)))
    with TestClient(app) as client:
        yield client, app, folder


def test_a_short_run_streams_snapshots_and_saves_a_model_transformers_opens(served):
    client, _, folder = served
    response = client.post("/api/lab/train", json={**SMALL, "steps": 20, "every": 5, "seed": 3})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = checked_lines(client, "/api/lab/train", response)
    started, *snapshots, end = lines
    assert started["event"] == "started" and started["config"]["steps"] == 20
    assert started["seconds"] > 0 and started["bytes"] > 0
    assert [s["step"] for s in snapshots] == [0, 5, 10, 15, 20]
    assert all(s["event"] == "snapshot" for s in snapshots)
    assert torch.tensor(snapshots[-1]["maps"]).shape == (2, 2, 8, 8)
    assert end["event"] == "end" and end["reason"] == "done" and end["steps_done"] == 20
    model_id = end["model"]
    assert model_id.startswith("trained/")
    saved = folder / model_id.removeprefix("trained/")
    gpt = GPT2LMHeadModel.from_pretrained(saved, attn_implementation="eager").eval()
    config = TrainConfig(**{**SMALL, "steps": 20, "seed": 3})
    probe = probe_batches(config)[0][:1]  # the first probe sequence: the maps' own
    with torch.no_grad():
        attentions = gpt(probe, output_attentions=True).attentions
    ours = torch.stack([a[0] for a in attentions])  # (L, H, T, T)
    torch.testing.assert_close(ours, torch.tensor(snapshots[-1]["maps"]), atol=1e-5, rtol=0)
    listed = [m["id"] for m in client.get("/api/models").json()["models"]]
    assert model_id in listed  # openable in the explorer from now on
    # the probe, as words, is a text the explorer tokenizes back into the probe's own ids
    text = " ".join(started["probe"])
    assert len(started["probe"]) == 8 and gpt.config.vocab_size == 9
    tokens = AutoTokenizer.from_pretrained(saved)(text)["input_ids"]
    assert tokens == probe[0].tolist()
    maps = client.post("/api/attention", json={"model": model_id, "text": text, "format": "json"})
    assert maps.status_code == 200, maps.text


@pytest.mark.parametrize(
    "knob",
    [{"heads": 3, "d_model": 16}, {"steps": 0}, {"lr": 0}, {"task": "sort"}, {"extra": 1},
     {"heads": 4, "d_model": 64, "half": 12, "steps": 5000, "every": 1},  # 92 MB of snapshots
     {"layers": 3, "heads": 8, "d_model": 128, "half": 32, "batch": 128, "steps": 5000,
      "every": 5000}],  # estimated at 20 minutes
)  # fmt: skip
def test_a_bad_knob_is_refused_before_any_work(served, knob):
    client, _, _ = served
    response = client.post("/api/lab/train", json={**SMALL, **knob})
    assert response.status_code == 422, response.text[:300]
    rules = ("d_model", "every", "batch")  # rules the schema cannot state: code input_rule
    assert (response.json()["code"] == "input_rule") == any(k in knob for k in rules)


def test_a_run_past_the_cap_is_refused_with_retry_after(served):
    client, _, _ = served
    taken = [service._slots.acquire(blocking=False) for _ in range(service.MAX_TRAINING_JOBS)]
    try:
        assert all(taken)
        response = client.post("/api/lab/train", json={**SMALL, "steps": 2})
        assert response.status_code == 503 and int(response.headers["retry-after"]) > 0
    finally:
        for _ in taken:
            service._slots.release()


def test_a_closed_connection_stops_the_run(served, tmp_path):
    """What ProgressStream does when its client goes: stop(), then the run ends at its next
    snapshot and says so; nothing is saved."""
    _, app, _ = served

    async def read_two_then_leave() -> list[dict]:
        body = TrainRequest(**SMALL, steps=2000, every=10)
        lines, stop = service.start_training(body, tmp_path, app.state.manager, 0)
        got = []
        async for raw in lines:
            got.append(json.loads(raw))
            if len(got) == 3:
                stop()
        return got

    got = asyncio.run(read_two_then_leave())
    assert got[-1]["event"] == "end" and got[-1]["reason"] == "client_gone"
    assert got[-1]["steps_done"] < 2000 and got[-1]["model"] is None
    assert not any(tmp_path.iterdir())


def test_only_the_newest_checkpoints_are_kept_and_the_rest_forgotten(served, tmp_path):
    _, app, _ = served
    manager = app.state.manager
    for i, name in enumerate(("old", "mid", "new")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        os.utime(tmp_path / name, (1_000 + i, 1_000 + i))
    service.register_saved(tmp_path, manager)
    assert {"trained/old", "trained/mid", "trained/new"} <= set(manager.registry)
    assert sorted(service.keep_newest(tmp_path, manager, keep=1)) == ["mid", "old"]
    assert [p.name for p in tmp_path.iterdir()] == ["new"]
    assert "trained/new" in manager.registry and "trained/old" not in manager.registry
    assert manager.remove_folder("trained/new") and not manager.remove_folder("trained/new")
