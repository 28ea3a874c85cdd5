"""Deep zoom's stated bound against transformers' own eager weights, at lengths where the pass
runs PyTorch's fused attention: every layer of SmolLM2 over its whole context of random words
(the kind of text that drifts most), and over 2,048 tokens of three other kinds. The reference
is an eager pass made a block of query rows at a time (tests/support/eager_blocks.py), bit for
bit the weights of a whole eager pass."""

from __future__ import annotations

import pytest
import torch

from atlas_engine.inference.forward import EAGER_LAYER_BYTES, pass_kernel
from atlas_engine.models.placement import FUSED_PASS_MAX_ABS_DIFF, REPLAY_MAX_ABS_DIFF
from atlas_engine.models.registry import SMOLLM2_ID
from tests.support.eager_blocks import eager_blocks
from tests.support.smollm2_texts import kinds_of_text, prose_texts

CELL = 128


@pytest.fixture(scope="module")
def smollm2(client, app):
    return app.state.manager.get(SMOLLM2_ID)


def worst_gap(client, loaded, text: str, cell: int) -> tuple[float, int, float]:
    """(largest |zoom - eager| over every layer, head and block, its layer, error_bound)."""
    layers = range(loaded.arch.num_layers)
    reference = eager_blocks(loaded, text, set(layers), cell)
    worst, at, bound = 0.0, -1, None
    for layer in layers:
        body = {"model": SMOLLM2_ID, "text": text, "layer": layer, "cell": cell, "reduce": "max"}
        answer = client.post("/api/attention/tiles", json=body)
        assert answer.status_code == 200, answer.text
        gap = float((torch.tensor(answer.json()["values"]) - reference[layer]).abs().max())
        worst, at = max((worst, at), (gap, layer))
        bound = answer.json()["error_bound"]
    return worst, at, bound


@pytest.mark.slow
def test_the_reference_is_eager_attention_bit_for_bit(smollm2):
    text = prose_texts(1400)[0]  # over the eager-pass limit, so the server's pass is fused
    layers = set(range(smollm2.arch.num_layers))
    blocked = eager_blocks(smollm2, text, layers, CELL)
    whole = eager_blocks(smollm2, text, layers, CELL, whole=True)
    assert all(torch.equal(blocked[layer], whole[layer]) for layer in layers)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["repeated text", "prose", "code"])
def test_deep_zoom_over_a_fused_pass_is_within_its_bound(client, smollm2, kind):
    text = kinds_of_text(2048)[kind]
    assert pass_kernel(smollm2, 2048) == "sdpa"
    worst, layer, bound = worst_gap(client, smollm2, text, 64)
    assert bound == FUSED_PASS_MAX_ABS_DIFF
    assert worst <= FUSED_PASS_MAX_ABS_DIFF, (kind, layer, worst)


@pytest.mark.slow
def test_an_eager_pass_states_the_replays_bound(client, smollm2):
    seq = 256
    assert 4 * smollm2.arch.num_heads * seq * seq <= EAGER_LAYER_BYTES
    body = {"model": SMOLLM2_ID, "text": prose_texts(seq)[0], "layer": 0, "cell": 16}
    answer = client.post("/api/attention/tiles", json=body)
    assert answer.json()["error_bound"] == REPLAY_MAX_ABS_DIFF["float32"]


@pytest.mark.alone
@pytest.mark.timeout(1800)  # about 9 minutes on two idle cores, past the suite's 600 s default
def test_deep_zoom_at_the_whole_context_is_within_its_bound(client, smollm2):
    """Minutes: the eager reference alone is 30 layers of 8,192 × 8,192 weights."""
    text = kinds_of_text(smollm2.max_tokens)["random words"]
    assert len(smollm2.tokenizer(text)["input_ids"]) > smollm2.max_tokens - 16
    worst, layer, bound = worst_gap(client, smollm2, text, CELL)
    assert bound == FUSED_PASS_MAX_ABS_DIFF
    assert worst <= FUSED_PASS_MAX_ABS_DIFF, (layer, worst)
    assert worst > REPLAY_MAX_ABS_DIFF["float32"]  # why the fused pass states its own bound
