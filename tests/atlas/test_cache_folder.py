"""Issue 49.8: run_model keeps converted weights in the user's cache folder, or the folder
ATLAS_CACHE_DIR names, and never writes into the current folder."""

from pathlib import Path

import pytest

from atlas_engine.models import sources
from atlas_engine.models.registry import SMOLLM2_ID
from attention_atlas.run import cache_folder, run_model
from tests.conftest import CACHE_DIR


def test_the_cache_folder_is_the_one_atlas_cache_dir_names(monkeypatch, tmp_path):
    monkeypatch.setenv("ATLAS_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_folder() == tmp_path / "mine"
    monkeypatch.setenv("ATLAS_CACHE_DIR", "~/atlas-cache")
    assert cache_folder() == Path.home() / "atlas-cache"


def test_unset_it_is_the_users_cache_folder_not_the_current_one(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for unset in (None, "", "  "):
        if unset is None:
            monkeypatch.delenv("ATLAS_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("ATLAS_CACHE_DIR", unset)
        assert cache_folder() == tmp_path / "xdg" / "attention-atlas"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_folder() == Path.home() / ".cache" / "attention-atlas"


@pytest.fixture
def converted(tmp_path) -> Path:
    """A cache folder holding the suite's converted SmolLM2 copy, its files linked, not copied
    (the copy is made by the suite's first SmolLM2 load in a clean clone)."""
    good = sources.smollm2_folder(CACHE_DIR, lambda *_: None)
    cache = tmp_path / "cache"
    (cache / good.name).mkdir(parents=True)
    for path in good.iterdir():
        (cache / good.name / path.name).symlink_to(path)
    return cache


@pytest.mark.slow
@pytest.mark.parametrize("chosen_by", ["ATLAS_CACHE_DIR", "XDG_CACHE_HOME"])
def test_run_model_leaves_the_current_folder_empty(chosen_by, converted, tmp_path, monkeypatch):
    def convert(*_):
        raise AssertionError("run_model converted SmolLM2 again instead of reading the cache")

    monkeypatch.setattr(sources, "_write_converted_copy", convert)
    if chosen_by == "ATLAS_CACHE_DIR":
        monkeypatch.setenv("ATLAS_CACHE_DIR", str(converted))
    else:  # the user's cache folder: $XDG_CACHE_HOME/attention-atlas on Linux
        monkeypatch.delenv("ATLAS_CACHE_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        (tmp_path / "xdg").mkdir()
        converted.rename(tmp_path / "xdg" / "attention-atlas")
        converted = tmp_path / "xdg" / "attention-atlas"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    run = run_model(SMOLLM2_ID, "One, two, three")
    assert run.causal and run.attentions.shape[:2] == (30, 9)
    assert list(work.iterdir()) == []
    copy = sources.smollm2_converted_folder(converted)
    assert sorted(path.name for path in converted.iterdir()) == [sources.CACHE_LOCK, copy.name]
