"""POST /api/attention/predictions: the model's own top-k, exactly as its LM head gives it."""

import pytest
import torch
import transformers as tf

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.models.sources import smollm2_converted_folder
from tests.conftest import CACHE_DIR

pytestmark = pytest.mark.slow


def reference_top(model, text: str, k: int) -> tuple[list[list[int]], torch.Tensor]:
    """Top-k ids and probabilities at every position from transformers' own with-head model."""
    enc = model.tokenizer(text, return_tensors="pt")
    if "Causal" in type(model).__name__:
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        logits = model(**enc).logits[0].float()
    top = logits.softmax(-1).topk(k, dim=-1)
    return top.indices.tolist(), top.values


def body_of(client, model_id: str, text: str, k: int = 5) -> dict:
    response = client.post(
        "/api/attention/predictions", json={"model": model_id, "text": text, "top_k": k}
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_masked_lm_predicts_the_mask_as_built(client, local_checkpoints):
    text = "the capital of france is [MASK] ."
    body = body_of(client, "local/bert-mlm", text)
    assert body["kind"] == "masked" and body["mask_token"] == "[MASK]"
    (only,) = body["positions"]  # one mask token, one prediction
    assert body["tokens"][only["position"]] == "[MASK]"
    top = only["candidates"][0]
    assert top["token"] == "paris" and top["probability"] > 0.999  # the bias put there

    folder = local_checkpoints["local/bert-mlm"]
    model = tf.AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager")
    model.tokenizer = tf.AutoTokenizer.from_pretrained(folder)
    ids, probs = reference_top(model, text, 5)
    assert [c["token_id"] for c in only["candidates"]] == ids[only["position"]]
    got = torch.tensor([c["probability"] for c in only["candidates"]])
    assert torch.allclose(got, probs[only["position"]], rtol=1e-5, atol=1e-7)
    assert body_of(client, "local/bert-mlm", "no mask here")["positions"] == []


def test_next_token_predictions_are_the_causal_lms_own(client):
    text = "One, two, three, four, five, six"
    body = body_of(client, SMOLLM2_ID, text, k=5)
    assert body["kind"] == "next_token" and len(body["positions"]) == len(body["tokens"])
    folder = smollm2_converted_folder(CACHE_DIR)
    model = tf.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    model.tokenizer = tf.AutoTokenizer.from_pretrained(folder)
    ids, probs = reference_top(model, text, 5)
    enc = model.tokenizer(text, return_tensors="pt")
    with torch.no_grad():  # the exact softmax of the same logits, in float64
        exact = model(input_ids=enc["input_ids"]).logits[0].double().softmax(-1)
    for row in body["positions"]:
        got_ids = [c["token_id"] for c in row["candidates"]]
        assert got_ids == ids[row["position"]]
        got = torch.tensor([c["probability"] for c in row["candidates"]], dtype=torch.float64)
        assert torch.allclose(got, probs[row["position"]].double(), rtol=1e-4, atol=1e-6)
        want = exact[row["position"], got_ids]  # float64 softmax, then float32's one rounding
        assert torch.allclose(got, want, rtol=2**-23, atol=0), (got - want).abs().max()
    enc = model.tokenizer(text).input_ids
    ranked = [r for r in body["positions"] if r["actual_rank"] is not None]
    assert ranked, "a counting text: the model should rank some true next tokens"
    for row in ranked:
        assert row["candidates"][row["actual_rank"]]["token_id"] == enc[row["position"] + 1]
    assert body["positions"][-1]["actual_rank"] is None  # nothing follows the last token


def test_a_checkpoint_without_a_head_says_so(client):
    response = client.post(
        "/api/attention/predictions", json={"model": MINILM_ID, "text": "a [MASK] b"}
    )
    assert response.status_code == 422
    assert "no masked-language-model head" in response.json()["detail"]
    listed = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    assert listed[MINILM_ID]["predicts"] == "none"
    assert listed["local/bert-mlm"]["predicts"] == "masked"
