"""estimated_tokens bounds a text's tokens from above before it is tokenised, against the real
tokenizers: admission must never take a long text for a short one. Three characters a token
was assumed; SmolLM2 reads an emoji as up to four tokens and every digit as one."""

import pytest

from atlas_engine.inference.tokens import NO_BOUND, estimated_tokens, token_bound
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID

TEXTS = {
    "emoji": "😀🎉🚀🧠👩‍👩‍👧 " * 2,
    "digits": "31415926535897932384 " * 3,
    "accents, CJK and ligatures": "Ünïcödé İstanbul 한국어 中文 ﬁne ½ " * 2,
    "prose": "Attention lets every token read the tokens before it. " * 2,
}
"""Each under 128 tokens, the smallest limit here (local/bert-tiny's), alone and as a pair."""
MODELS = [SMOLLM2_ID, MINILM_ID, "local/gpt2-tiny", "local/roberta-tiny", "local/bert-tiny"]


def tokens(loaded, text, text_pair=None) -> int:
    return len(loaded.tokenizer(text, text_pair)["input_ids"])


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", TEXTS)
def test_the_estimate_is_never_below_the_count(app, model, name):
    loaded = app.state.manager.get(model)
    text = TEXTS[name]
    assert token_bound(loaded.tokenizer) is not NO_BOUND  # each has a bound of its own
    assert tokens(loaded, text) <= estimated_tokens(loaded, text) <= loaded.max_tokens
    assert tokens(loaded, text, text) <= estimated_tokens(loaded, text, text)


def test_smollm2_reads_digits_and_emoji_past_three_characters_a_token(app):
    loaded = app.state.manager.get(SMOLLM2_ID)
    for name in ("emoji", "digits"):
        text = TEXTS[name]
        assert tokens(loaded, text) > 2 + len(text) // 3  # the guess this replaces
    digits = TEXTS["digits"]
    assert estimated_tokens(loaded, digits) == tokens(loaded, digits)  # a byte, a token: tight


def test_the_estimate_stops_at_the_models_limit(app):
    loaded = app.state.manager.get(MINILM_ID)
    assert estimated_tokens(loaded, "word " * 10_000) == loaded.max_tokens == 512
