"""The induction test text: two copies of the same random ids, for every embedded tokenizer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from atlas_engine.errors import InvalidInput
from atlas_engine.models.sources import minilm_folder, smollm2_folder
from atlas_engine.services.induction import induction_text
from tests.support.live import REPO

pytestmark = pytest.mark.slow


def _loaded(folder):
    return SimpleNamespace(id=str(folder), tokenizer=AutoTokenizer.from_pretrained(folder))


@pytest.fixture(scope="module", params=["minilm", "smollm2"])
def loaded(request):
    if request.param == "minilm":
        return _loaded(minilm_folder(print))
    return _loaded(smollm2_folder(REPO / "var" / "cache", print))


@pytest.mark.parametrize("length", [4, 40, 200])
def test_both_copies_are_the_same_ids(loaded, length):
    text = induction_text(loaded, length, seed=0)
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 2 * length
    assert ids[:length] == ids[length:]  # the first word too: " posts" twice, not "posts"


def test_a_tokenizer_whose_copies_differ_is_refused(loaded):
    merging = SimpleNamespace(id="merging", tokenizer=_MergesTheFirstWord(loaded.tokenizer))
    with pytest.raises(InvalidInput, match="do not repeat"):
        induction_text(merging, 10, seed=0)


class _MergesTheFirstWord:
    """A tokenizer that gives a text's first word one more piece, as some SentencePiece
    vocabularies do with a text's first space: the copies then differ."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.all_special_ids = tokenizer.all_special_ids

    def __len__(self):
        return len(self._tokenizer)

    def decode(self, ids):
        return self._tokenizer.decode(ids)

    def __call__(self, text, add_special_tokens=False):
        ids = self._tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        return {"input_ids": ids if len(ids) == 1 else [0, *ids]}
