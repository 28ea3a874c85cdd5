"""A corpus store that cannot be read (issue 50.8): not a 500 with a traceback but a 503 saying
so, the file moved aside so that a new store starts empty, and /api/health naming it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.corpus.job import plan, run_job
from atlas_engine.corpus.store import Store
from tests.atlas_engine.corpus.test_corpus import PROSE
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


def served(local_checkpoints, store_path) -> TestClient:
    settings = make_settings(local_checkpoints, corpus_store=str(store_path))
    return TestClient(create_app(settings), raise_server_exceptions=False)


def test_a_file_that_is_not_sqlite_is_moved_aside_with_a_503(local_checkpoints, tmp_path):
    store = tmp_path / "corpus.sqlite"
    store.write_bytes(b"this is not a database, whatever its name says" * 100)
    client = served(local_checkpoints, store)
    first = client.get("/api/corpus")
    assert first.status_code == 503 and first.json()["code"] == "store_unavailable"
    assert "moved aside to" in first.json()["detail"] and first.headers["Retry-After"] == "1"
    [moved] = tmp_path.glob("corpus.sqlite.corrupt-*")
    assert moved.read_bytes().startswith(b"this is not a database") and not store.exists()
    assert str(moved) in client.get("/api/health").json()["corpus_store"]
    after = client.get("/api/corpus").json()  # the next read: no store, and why
    assert after["runs"] == [] and str(moved) in after["problem"]


def test_a_store_damaged_after_it_opened_is_moved_aside_too(local_checkpoints, tmp_path):
    path = tmp_path / "corpus.sqlite"
    client = served(local_checkpoints, path)
    loaded = client.app.state.manager.get("local/qwen2-tiny")
    source = tmp_path / "texts.txt"
    source.write_text("\n\n".join([PROSE] * 6))
    store = Store(path)
    run = run_job(loaded, store, plan(store, loaded, str(source), 48, limit=12))
    store.close()
    size = path.stat().st_size
    with path.open("r+b") as file:  # the header stays; the pages after it are overwritten
        file.seek(4096)
        file.write(b"\xff" * (size - 4096))
    answer = client.get(f"/api/corpus/{run.id}/heads")
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "store_unavailable" and list(tmp_path.glob("*.corrupt-*"))
    assert client.get("/api/health").json()["status"] == "ok"


def test_a_readable_store_names_nothing(client):
    assert client.get("/api/health").json() == {"status": "ok"}
