"""A text's encoding read from the Rust tokenizer directly is transformers' own, on every
tokenizer the tests load, for single texts and sentence pairs, whatever state another call left."""

import pytest
import torch

from atlas_engine.inference.encoding import _plain_backend, encode, word_numbers
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from tests.conftest import LOCAL_MODELS

TEXTS = [
    "The cat sat on the mat.",
    "  Leading and trailing spaces  ",
    "Ünïcödé, 日本語のテキスト, and emoji 🧪🔬 mixed in.",
    "Tabs\tand\nnew lines\r\nand [SEP] [CLS] <|endoftext|> <s> </s> written out",
    "a",
    " ",
]
PAIRS = [("Where is the cat?", "The cat is on the mat."), ("One sentence.", "")]
MODELS = [MINILM_ID, SMOLLM2_ID, *LOCAL_MODELS]


def reference(tokenizer, text, text_pair):
    """transformers' own call, as the server made it before, with its word numbers."""
    encoding = tokenizer(text, text_pair, return_tensors="pt", truncation=False)
    return dict(encoding), word_numbers(encoding.word_ids(0), encoding.sequence_ids(0))


@pytest.mark.parametrize("model_id", MODELS)
def test_the_direct_encoding_is_transformers_own(app, model_id):
    loaded = app.state.manager.get(model_id)
    tokenizer = loaded.tokenizer
    pairs = [] if loaded.causal else PAIRS
    for _ in range(2):  # the second after a call that left truncation and padding on the backend
        for text, text_pair in [(t, None) for t in TEXTS] + pairs:
            expected, expected_words = reference(tokenizer, text, text_pair)
            got, words = encode(tokenizer, text, text_pair)
            assert got.keys() == expected.keys()
            for name in expected:
                assert got[name].dtype == torch.long and got[name].shape[0] == 1
                assert torch.equal(got[name], expected[name]), (model_id, name, text)
            assert words == expected_words and len(words) == got["input_ids"].shape[1]
        tokenizer(
            ["a b", "a much longer text than that"],
            padding=tokenizer.pad_token is not None,
            truncation=True,
            max_length=3,
        )


@pytest.mark.parametrize("model_id", [MINILM_ID, SMOLLM2_ID])
def test_the_embedded_models_are_encoded_by_the_rust_tokenizer_directly(app, model_id):
    tokenizer = app.state.manager.get(model_id).tokenizer
    encode(tokenizer, "warm", None)  # transformers' call takes off a truncation tokenizer.json set
    assert _plain_backend(tokenizer) is tokenizer.backend_tokenizer


def test_a_pair_numbers_segment_b_words_after_segment_a(app):
    tokenizer = app.state.manager.get(MINILM_ID).tokenizer
    _, words = encode(tokenizer, "red fox", "blue sky")
    assert words == [-1, 0, 1, -1, 2, 3, -1]
