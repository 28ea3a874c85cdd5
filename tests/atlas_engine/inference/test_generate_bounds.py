"""What a generated token's probability is exact to, and the stated bound of a cached step
against a full pass over the same tokens (SmolLM2: prompts of CJK text and emoji, prose, and a
long one; 20 new tokens each)."""

from __future__ import annotations

import pytest
import torch

from atlas_engine.inference.generate import (
    CACHED_LOGITS_MAX_ABS_DIFF,
    CACHED_PROBABILITY_MAX_ABS_DIFF,
    continue_text,
)
from atlas_engine.models.registry import SMOLLM2_ID
from atlas_engine.schemas.generate import GeneratedToken
from tests.support.smollm2_texts import prose_texts

pytestmark = pytest.mark.slow

CJK_EMOJI = (
    "東京は日本の首都です。🍣🍜 私は毎朝コーヒーを飲みます ☕️ 北京是中国的首都。🐼 "
    "서울은 한국의 수도입니다 🇰🇷"
)


@pytest.fixture(scope="module")
def smollm2(client, app):
    return app.state.manager.get(SMOLLM2_ID)


@pytest.mark.parametrize("prompt", ["cjk", "prose", "long"])
def test_a_steps_probability_is_its_own_logits_and_a_full_pass_is_within_the_bound(smollm2, prompt):
    text = {"cjk": CJK_EMOJI, "prose": " The capital of France is Paris. The capital of"}.get(
        prompt
    ) or prose_texts(1500)[0]
    ids = smollm2.tokenizer(text, add_special_tokens=False)["input_ids"]
    steps = list(continue_text(smollm2, ids, 20))
    assert len(steps) == 20
    with torch.inference_mode():
        out = smollm2.predictor.generate(
            torch.tensor([ids]), max_new_tokens=20, do_sample=False, output_logits=True,
            return_dict_in_generate=True, pad_token_id=smollm2.tokenizer.eos_token_id,
        )  # fmt: skip
        full = smollm2.predictor(out.sequences).logits[0]  # (T + 20, vocab), no cache
    assert [s.token_id for s in steps] == out.sequences[0, len(ids) :].tolist()
    logit_gap = probability_gap = 0.0
    for i, step in enumerate(steps):
        own = out.logits[i][0]  # the step's logits, as generate() computed them
        assert step.probability == float(own.double().softmax(-1)[step.token_id])  # exactly
        whole = full[len(ids) - 1 + i]
        logit_gap = max(logit_gap, float((whole - own).abs().max()))
        probability_gap = max(
            probability_gap,
            abs(float(whole.double().softmax(-1)[step.token_id]) - step.probability),
        )
    assert 0 < logit_gap <= CACHED_LOGITS_MAX_ABS_DIFF  # the cache does round differently
    assert probability_gap <= CACHED_PROBABILITY_MAX_ABS_DIFF


def test_the_api_states_the_bound():
    described = GeneratedToken.model_fields["probability"].description
    assert f"within {CACHED_PROBABILITY_MAX_ABS_DIFF:.0e} of this".replace("e-0", "e-") in described
