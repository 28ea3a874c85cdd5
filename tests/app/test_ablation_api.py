"""POST /api/attention/ablate. Known by construction: switching a head off at the output
projection is the same model as one whose projection never reads that head (its weight
columns zeroed), so the two runs agree; the ablated layer and those before it keep their maps."""

import copy

import pytest
import torch

from atlas_engine.models.registry import MINILM_ID, Family
from atlas_engine.schemas.ablation import AblationResponse
from tests.support import family_modules as families
from tests.support.float32_json import assert_answer_is, assert_float32_numbers

TEXT = "One, two, three, four, five, six, seven"
pytestmark = pytest.mark.slow


def ablate(client, model_id: str, heads, **extra) -> dict:
    body = {
        "model": model_id,
        "text": TEXT,
        "heads": [{"layer": layer, "head": h} for layer, h in heads],
    }
    response = client.post("/api/attention/ablate", json={**body, **extra})
    answer = assert_answer_is(AblationResponse, response)  # the schema, weights as float32
    assert_float32_numbers([answer["weights"], answer["ablated_weights"]])
    return answer


def surgery(loaded, layer: int, head: int):
    """A copy of the with-head model whose output projection in `layer` ignores `head`."""
    whole = copy.deepcopy(loaded.predictor if loaded.predictor is not None else loaded.model)
    base = whole.base_model if loaded.predictor is not None else whole
    projection = families.output_projections(base, loaded.family)[layer]
    cols = slice(head * loaded.arch.head_dim, (head + 1) * loaded.arch.head_dim)
    with torch.no_grad():
        if loaded.family is Family.GPT2:  # Conv1D: (in, out), x @ W
            projection.weight[cols, :] = 0
        else:  # nn.Linear: (out, in), x @ W.T
            projection.weight[:, cols] = 0
    return whole


@pytest.mark.parametrize("model_id", ["local/gpt2-tiny", "local/qwen2-tiny", "local/bert-mlm"])
def test_zero_ablation_is_the_model_without_that_heads_weights(client, app, model_id):
    loaded = app.state.manager.get(model_id)
    text = TEXT if loaded.causal else "one, two, [MASK], four"
    answer = ablate(client, model_id, [(0, 1)], layer=1, head=2, text=text, top_k=5)
    whole = surgery(loaded, 0, 1)
    enc = loaded.tokenizer(text, return_tensors="pt")
    if loaded.causal:
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        out = whole(**enc, output_attentions=True)
    expected = out.attentions[1][0, 2]
    assert torch.allclose(torch.tensor(answer["ablated_weights"]), expected, atol=1e-6)
    probs = out.logits[0].float().softmax(-1)
    assert answer["positions"], "every model here has an LM head"
    for row in answer["positions"]:
        top = probs[row["position"]].topk(5)
        assert [c["token_id"] for c in row["ablated"]] == top.indices.tolist()
        got = torch.tensor([c["probability"] for c in row["ablated"]])
        assert torch.allclose(got, top.values, rtol=1e-4, atol=1e-6)


def test_earlier_layers_keep_their_maps_and_later_ones_move(client):
    answer = ablate(client, "HuggingFaceTB/SmolLM2-135M-Instruct", [(3, 0), (3, 4)], layer=3)
    change = torch.tensor(answer["attention_change"])  # (30, 9)
    assert (change[:4] == 0).all()  # in and before layer 3 nothing can differ
    assert (change[4:].amax(dim=1) > 0).all()
    assert answer["weights"] == answer["ablated_weights"]  # layer 3 itself, shown both ways
    assert max(row["kl"] for row in answer["positions"]) > 0
    for row in answer["positions"]:  # the unablated top-k is the cached run's own
        assert row["base"][0]["probability"] >= row["base"][-1]["probability"]


def test_mean_ablation_and_a_model_without_a_head(client):
    answer = ablate(client, MINILM_ID, [(0, 0)], mode="mean")
    assert answer["predicts"] == "none" and answer["positions"] == []
    assert answer["mode"] == "mean" and max(map(max, answer["attention_change"][1:])) > 0


def test_bad_ablations_are_refused_before_any_work(client):
    cases = [
        ({"heads": [{"layer": 0, "head": 0}, {"layer": 0, "head": 0}]}, "distinct"),
        ({"heads": [{"layer": 6, "head": 0}]}, "layer"),
        ({"heads": [{"layer": 0, "head": 0}], "head": 12}, "head"),
        ({"heads": []}, "heads"),
    ]
    for extra, word in cases:
        body = {"model": MINILM_ID, "text": TEXT, **extra}
        response = client.post("/api/attention/ablate", json=body)
        assert response.status_code == 422 and word in response.json()["detail"], response.text
    outside = client.post(
        "/api/attention/ablate",
        json={"model": "local/gptneo-tiny", "text": TEXT, "heads": [{"layer": 0, "head": 0}]},
    )
    assert outside.status_code == 422, outside.text
    assert "outside transformers' attention interface" in outside.json()["detail"]


COPY_TEXT = " red green blue cat dog sun moon tree red cat"  # one token a word (handmade.WORDS)


def test_a_hand_built_previous_token_head_does_what_it_was_built_to_do(client):
    """local/copy-previous (tests/support/handmade.py): head 0 copies the previous token, so
    the model predicts it; switched off, the model predicts the current token; head 1 writes
    nothing, so switching it off changes nothing."""
    model = "local/copy-previous"
    maps = client.post(
        "/api/attention", json={"model": model, "text": COPY_TEXT, "format": "json"}
    ).json()
    tokens = maps["tokens"]
    head0 = torch.tensor(maps["attentions"][0][0])
    assert (head0.diagonal(-1) > 0.999).all()  # every query on the token before it
    on = ablate(client, model, [(0, 1)], text=COPY_TEXT)  # head 1 off: a control
    assert max(row["kl"] for row in on["positions"]) < 1e-9
    predicted = [row["base"][0]["token"] for row in on["positions"]]
    assert predicted[1:] == tokens[:-1]  # with head 0: the previous token at every position
    off = ablate(client, model, [(0, 0)], text=COPY_TEXT)
    after = [row["ablated"][0]["token"] for row in off["positions"]]
    assert after == tokens  # without it: the current token
    changed = [
        row
        for row in off["positions"][1:]
        if tokens[row["position"] - 1] != tokens[row["position"]]
    ]
    assert changed and all(row["kl"] > 5 and row["logit_change"] < -10 for row in changed)
    space = client.post(
        "/api/attention/qkspace", json={"model": model, "text": COPY_TEXT, "layer": 0, "head": 0}
    ).json()["heads"][0]
    assert [keys[0] for keys in space["strongest"]][1:] == list(range(len(tokens) - 1))
