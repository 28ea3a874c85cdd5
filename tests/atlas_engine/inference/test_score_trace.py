"""One attention score taken apart (atlas_engine.inference.score_trace) on tiny random
checkpoints of every family the capture path replays: the pairs, each side's totals and the
contrast's sum to the score the model computed, every layer; masked keys, softcaps, GQA and
the embeddings' split are held here, and the hand-built model gives a known answer."""

from __future__ import annotations

import pytest
import torch

from atlas_engine.inference.head_inputs import head_inputs
from atlas_engine.inference.head_weights import model_composition
from atlas_engine.inference.score_trace import (
    PARTS_MAX_REL,
    TraceRefused,
    trace_layout,
    trace_score,
)
from tests.conftest import gpt2_tokenizer
from tests.support import handmade
from tests.support.tiny import DECODERS, ENCODER_DECODERS, ENCODERS, load_folder, load_tiny

pytestmark = pytest.mark.slow

TEXT = " the cat sat on the mat because it was warm and then"
FAMILIES = [*DECODERS, *ENCODERS, *ENCODER_DECODERS]  # T5: its encoder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    return {name: load_tiny(name, root / name) for name in FAMILIES}


def assert_adds_up(total, bias, parts):
    """parts (a tensor of pieces or pairs) and the bias sum to total within the stated bound."""
    size = max(1.0, float(parts.abs().sum()))
    assert abs(float(parts.sum()) + bias - total) <= PARTS_MAX_REL * size


@pytest.mark.parametrize("name", FAMILIES)
def test_the_pairs_sum_to_the_real_score_in_every_layer(models, name):
    loaded = models[name]
    query, key = 9, (7 if name in DECODERS else 8)  # inside every tiny model's window
    for layer in range(loaded.arch.num_layers):
        for head in (0, loaded.arch.num_heads - 1):
            trace = trace_score(loaded, TEXT, layer, head, query, key)
            assert trace.stream_max_abs_diff < 1e-5
            for parts in (trace.matrix, trace.query_side, trace.key_side):
                assert_adds_up(trace.score, trace.position_bias, parts)
            assert trace.contrast is not None and trace.contrast != key
            for parts in (trace.contrast_matrix, trace.contrast_query_side,
                          trace.contrast_key_side):  # fmt: skip
                assert_adds_up(trace.contrast_score, trace.contrast_position_bias, parts)
            # every earlier head and MLP is a piece, and the embeddings and the bias terms
            kinds = [p.kind for p in trace.names]
            assert kinds.count("head") == layer * loaded.arch.num_heads
            assert kinds.count("mlp") == layer and kinds[-1] == "bias"


def test_the_real_score_is_the_models_own(models):
    """The traced score is the pre-softmax score the model's eager attention formed: its
    softmax over the row gives the model's own weights (llama, no softcap or bias)."""
    loaded = models["llama"]
    ids = loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        maps = loaded.model(input_ids=ids, output_attentions=True).attentions
    query = 9
    scores = torch.tensor([trace_score(loaded, TEXT, 1, 2, query, key).score
                           for key in range(query + 1)], dtype=torch.float64)  # fmt: skip
    assert torch.allclose(scores.softmax(0), maps[1][0, 2, query, : query + 1].double(), atol=1e-6)


def test_a_position_bias_is_a_term_of_its_own(models):
    """T5's relative position bias is added to the score, not made by any piece."""
    trace = trace_score(models["t5"], TEXT, 1, 1, 4, 2)
    assert trace.position_bias != 0.0
    assert abs(
        float(trace.matrix.sum()) + trace.position_bias - trace.score
    ) <= PARTS_MAX_REL * max(1.0, float(trace.matrix.abs().sum()))


def test_a_softcap_is_applied_after_the_traced_score(models):
    trace = trace_score(models["gemma2"], TEXT, 1, 0, 9, 8)
    cap = models["gemma2"].model.config.attn_logit_softcapping
    assert trace.capped == pytest.approx(float(torch.tanh(torch.tensor(trace.score / cap)) * cap))
    assert trace_score(models["llama"], TEXT, 1, 0, 9, 8).capped is None


def test_a_group_shares_its_key_head(models):
    """llama here has 4 query heads on 2 key/value heads: heads 2 and 3 read key head 1, and
    their key-side pieces differ only through their queries."""
    assert [trace_score(models["llama"], TEXT, 1, h, 9, 8).key_head for h in range(4)] == [
        0, 0, 1, 1,
    ]  # fmt: skip


def test_a_key_outside_the_mask_has_no_score(models):
    with pytest.raises(TraceRefused, match="may not read key"):
        trace_score(models["llama"], TEXT, 0, 0, 3, 5)  # causal: a later key
    with pytest.raises(TraceRefused, match="sliding window"):
        trace_score(models["modernbert"], TEXT, 1, 0, 9, 2)  # its local layer's window is 4
    with pytest.raises(TraceRefused, match="contrast key"):
        trace_score(models["llama"], TEXT, 0, 0, 5, 3, contrast=3)


def test_the_embeddings_are_split_where_the_model_adds_them(models):
    def embeddings(name):
        names = trace_score(models[name], TEXT, 0, 0, 3, 2).names
        return [p.label for p in names if p.kind == "embedding"]

    assert embeddings("gpt2") == ["token embedding", "position embedding"]
    assert sorted(embeddings("bert")) == [
        "position embedding", "segment embedding", "token embedding",
    ]  # fmt: skip
    assert embeddings("llama") == ["token embedding"]
    kinds = {name: trace_layout(models[name]).roles[0].kind for name in ("bert", "gpt2")}
    assert kinds == {"bert": "post", "gpt2": "sum"}


def test_the_hand_built_previous_token_head_traces_to_the_position_embeddings(tmp_path):
    """The hand-built GPT-2's head 0 puts its query on the previous position and its key on its
    own: the score at (i, i - 1) is mostly the position embedding meeting the position embedding
    (the rest is each piece's share of the LayerNorm's centring, which cancels)."""
    tokenizer = gpt2_tokenizer()
    model = handmade.copy_previous_gpt2(tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = load_folder(tmp_path, "handmade")
    text = "".join(handmade.WORDS[:6])
    trace = trace_score(loaded, text, 0, 0, 5, 4)
    names = [p.label for p in trace.names]
    position = names.index("position embedding")
    row, col = divmod(int(trace.matrix.abs().argmax()), trace.matrix.shape[1])
    assert trace.shown[row] == position and trace.shown[col] == position
    assert float(trace.matrix[row, col]) > 0.95 * trace.score
    assert trace.score == pytest.approx(handmade.BETA / 8, rel=1e-3)  # β / √64


def test_the_hand_built_induction_head_traces_its_key_to_the_previous_token_head(tmp_path):
    """Issue 52.6's known answer: layer 1 head 0 at the second ' cat' attends to the ' dog'
    after the first, and its key side is layer 0 head 0's output at ' dog' (the word before
    it, written by the previous-token head) meeting, on the query side, the embedding of
    ' cat'."""
    tokenizer = gpt2_tokenizer()
    handmade.induction_gpt2(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = load_folder(tmp_path, "induction")
    text = "".join(handmade.WORDS[:6] * 2)  # red green blue cat dog sun, twice
    trace = trace_score(loaded, text, 1, 0, 9, 4)
    assert float(trace.weights[4]) > 0.99
    names = [p.label for p in trace.names]
    key = int(trace.key_side.abs().argmax())
    query = int(trace.query_side.abs().argmax())
    assert names[key] == "L0 H0" and float(trace.key_side[key]) > 0.9 * trace.score
    assert names[query] == "token embedding" and float(trace.query_side[query]) > 0.9 * trace.score
    row, col = divmod(int(trace.matrix.argmax()), trace.matrix.shape[1])
    assert names[trace.shown[row]] == "token embedding" and names[trace.shown[col]] == "L0 H0"
    # the circuit: L0 H0 -> L1 H0 is the strongest key edge on the text and from the weights
    inputs = head_inputs(loaded, text, [1])
    keys = inputs.from_heads[1, 0, 0, 0]  # (H,): each layer-0 head's share of L1 H0's keys
    assert int(keys.abs().argmax()) == 0 and float(keys[0]) > 0.9 * float(inputs.totals[1, 0, 0])
    composed = model_composition(loaded)
    k = composed.composition.scores["k"][0, :, 1, :]  # (earlier head, later head)
    assert int(k.argmax()) == 0 and float(k[0, 0]) > 3 * composed.baseline["k"]
