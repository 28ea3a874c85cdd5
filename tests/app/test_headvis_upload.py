"""POST /api/corpus/import: a zipped HeadVis tree becomes a run, wherever the folder sits in
the zip; a broken tree, a zip bomb, a body too large or not a zip is refused with nothing
stored (atlas_engine.corpus.headvis_upload)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.config import Settings
from tests.support.headvis import write_example_tree

ZIP = {"content-type": "application/zip"}


def zipped(folder: Path, prefix: str = "", change: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                name = path.relative_to(folder).as_posix()
                archive.writestr(prefix + name, (change or {}).get(name, path.read_bytes()))
    return out.getvalue()


@pytest.fixture
def client(tmp_path):
    settings = Settings(preload=[], corpus_store=str(tmp_path / "c.sqlite"), corpus_texts=0,
                        max_import_bytes=2**20)  # fmt: skip
    return TestClient(create_app(settings))


@pytest.fixture
def example(tmp_path) -> Path:
    return write_example_tree(tmp_path / "example")


def runs(client) -> list[dict]:
    return client.get("/api/corpus").json()["runs"]


def test_a_zipped_tree_becomes_a_run_wherever_its_folder_sits(client, example):
    answer = client.post("/api/corpus/import", content=zipped(example, "exports/x/"), headers=ZIP)
    assert answer.status_code == 201, answer.text
    run = answer.json()
    assert (run["model"], run["source"], run["layers"], run["heads"]) == (
        "example-org/tiny-2x2", "headvis", 2, 2,
    )  # fmt: skip
    head = client.get(f"/api/corpus/{run['id']}/heads/1/0/headvis").json()
    assert head["metrics"]["induction_score"] == 0.7083
    again = client.post("/api/corpus/import", content=zipped(example), headers=ZIP)
    assert [r["id"] for r in runs(client)] == [again.json()["id"]]  # the same tree replaced


def test_a_broken_tree_names_its_file_and_field_and_stores_nothing(client, example):
    body = json.loads((example / "heads/L1H1.json").read_text())
    body["sequences"][0]["attention_values"] = body["sequences"][0]["attention_values"][:-1]
    bad = zipped(example, change={"heads/L1H1.json": json.dumps(body).encode()})
    answer = client.post("/api/corpus/import", content=bad, headers=ZIP)
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("heads/L1H1.json: sequences[0]:")
    assert runs(client) == []


def test_a_zip_bomb_is_refused_before_it_is_unpacked(client, example):
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", (example / "config.json").read_bytes())
        archive.writestr("heads/L0H0.json", b" " * (8 * 2**20))  # 8 MB of spaces, 8 kB zipped
    assert len(bomb.getvalue()) < 2**16
    answer = client.post("/api/corpus/import", content=bomb.getvalue(), headers=ZIP)
    assert answer.status_code == 422 and "unpacks to" in answer.json()["detail"]
    assert runs(client) == []


@pytest.mark.parametrize(
    ("body", "headers", "status", "words"),
    [
        (b"PK not really", ZIP, 422, "not a zip archive"),
        (b"{}", {"content-type": "application/json"}, 415, "application/zip"),
        (b"x" * (2**20 + 1), ZIP, 413, "ATLAS_MAX_IMPORT_BYTES"),
    ],
)
def test_what_is_not_a_zipped_tree_gets_a_clear_4xx(client, body, headers, status, words):
    answer = client.post("/api/corpus/import", content=body, headers=headers)
    assert answer.status_code == status and words in answer.json()["detail"]
    assert runs(client) == []
