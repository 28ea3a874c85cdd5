"""A user's corpus read as hostile input (issue 50.7): every file is read in bounded pieces, a
file that is not a regular file is refused before it is opened, and each problem names the file
and the line; the command says so in one line and the store is left as it was."""

from __future__ import annotations

import json
import os
import resource
import threading

import pytest

from atlas_engine.corpus.store import Store
from atlas_engine.corpus.texts import (
    MAX_LINE_BYTES,
    MAX_PARAGRAPH_CHARS,
    CorpusProblem,
    paragraphs,
)
from attention_atlas.cli import main as atlas


def read_all(path) -> list[str]:
    return list(paragraphs(str(path)))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("deep.jsonl", b'{"text": "fine"}\n' + b"[" * 100_000 + b"\n", "deep.jsonl:2: each line"),
        ("lone.jsonl", b'{"text": "a \\ud800 b"}\n', "lone.jsonl:1: 'text' holds a lone surrogate"),
        ("latin.txt", b"First paragraph.\n\nCaf\xe9 au lait.\n", "latin.txt:3: not UTF-8"),
        ("wide.jsonl", b'{"text": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n', "wide.jsonl:1: a line longer"),
        ("number.jsonl", b'{"text": 3}\n', "number.jsonl:1: 'text' must be a string"),
    ],
)  # fmt: skip
def test_each_bad_line_is_named_with_its_file_and_line(tmp_path, name, content, says):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(CorpusProblem, match=r"\S") as found:
        read_all(tmp_path / name)
    assert says in str(found.value)


def test_a_huge_paragraph_or_line_is_read_in_pieces_and_kept_to_its_bound(tmp_path):
    """A 64 MB paragraph on one line: its first MAX_PARAGRAPH_CHARS are kept, the rest skipped
    in pieces, so memory does not follow the file's size."""
    path = tmp_path / "huge.txt"
    with path.open("wb") as file:
        file.write(b"Start. ")
        for _ in range(64):
            file.write(b"word " * (2**20 // 5))
        file.write(b"\n\nThe next paragraph.\n")
    before = peak_rss_mb()
    found = read_all(path)
    assert len(found[0]) <= MAX_PARAGRAPH_CHARS and found[1] == "The next paragraph."
    assert peak_rss_mb() - before < 32, "reading grew with the file"


def test_what_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path):
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "pipe.jsonl")
    for name in ("zero.txt", "pipe.jsonl"):
        failed: list[BaseException] = []
        reader = threading.Thread(target=_catch, args=(failed, tmp_path / name), daemon=True)
        reader.start()
        reader.join(10)
        assert not reader.is_alive(), f"{name} was read (it never ends)"
        assert "not a regular file" in str(failed[0])
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("A fine paragraph of several words that ends here.")
    (folder / "b.txt").symlink_to("/dev/zero")
    with pytest.raises(CorpusProblem, match=r"b\.txt: not a regular file"):
        read_all(folder)


def _catch(failed: list, path) -> None:
    try:
        read_all(path)
    except CorpusProblem as err:
        failed.append(err)


@pytest.mark.slow
def test_the_command_says_what_is_wrong_in_one_line_and_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"text": "A good text of the corpus. " * 3}) + "\n")
    (folder / "b.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "bad \\udfff"}\n')
    store = tmp_path / "corpus.sqlite"
    with pytest.raises(SystemExit) as stopped:
        atlas(["corpus", "run", "--model", "sentence-transformers/all-MiniLM-L6-v2", "--corpus",
               str(folder), "--store", str(store)])  # fmt: skip
    assert str(stopped.value).startswith("atlas corpus: ") and "b.jsonl:2:" in str(stopped.value)
    assert "\n" not in str(stopped.value)
    assert Store(store).runs() == []  # nothing half-written
