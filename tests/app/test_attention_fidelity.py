"""What the API returns is what transformers computed: exactly, where the server keeps a model's
maps, and where it replays them on demand from the hidden states (in float32 on this machine the
replay makes the model's own calls, so its maps are equal bit for bit; REPLAY_MAX_ABS_DIFF is the
bound stated for other hardware and half precision)."""

import pytest
import torch

from atlas_engine.inference.forward import run_forward
from atlas_engine.inference.layer_lab import lab_layer
from atlas_engine.models.placement import REPLAY_MAX_ABS_DIFF
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID, Family
from attention_core import causal_mask
from bench.compression import prose
from tests.support import family_modules as families

TEXT = "The quick brown fox jumps over the lazy dog because it wants to play."

pytestmark = pytest.mark.slow

ALL_MODELS = [
    MINILM_ID,
    SMOLLM2_ID,
    "local/gpt2-tiny",
    "local/gpt2-inverse-layer",
    "local/distilbert-tiny",
    "local/roberta-tiny",
    "local/bert-tiny",
    "local/qwen2-tiny",
    "local/mistral-tiny",
    "local/neox-tiny",  # no code of its own in Atlas: the capture path replays it
    "local/t5-tiny",  # the encoder's self-attention, with its position bias
    "local/gptneo-tiny",  # outside transformers' attention interface: maps only
]
REPLAYED = [m for m in ALL_MODELS if m != "local/gptneo-tiny"]


def direct_attentions(app, model_id, text, text_pair=None):
    """(L, H, T, T) straight from model(..., output_attentions=True), no app code involved."""
    loaded = app.state.manager.get(model_id)
    enc = loaded.tokenizer(text, text_pair, return_tensors="pt")
    if loaded.causal or "distilbert" in model_id:
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        out = loaded.model(**enc, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions])


@pytest.mark.parametrize("model_id", ALL_MODELS)
def test_api_json_equals_transformers(client, app, model_id):
    response = client.post("/api/attention", json={"model": model_id, "text": TEXT})
    assert response.status_code == 200, response.text
    body = response.json()
    got = torch.tensor(body["attentions"])
    expected = direct_attentions(app, model_id, TEXT)
    assert got.shape == expected.shape
    # Replayed on demand (or the pass's own, memoised) and kept maps alike: equal, float32
    # survives JSON exactly.
    assert torch.equal(got, expected)
    assert len(body["tokens"]) == got.shape[-1] == len(body["token_ids"])
    assert torch.allclose(got.sum(-1), torch.ones(got.shape[:-1]), atol=1e-5)
    if body["causal"]:
        upper = ~causal_mask(got.shape[-1])
        assert (got[..., upper] == 0).all()


@pytest.mark.parametrize("model_id", REPLAYED)
@pytest.mark.parametrize("length", ["sentence", "longest"])
def test_replay_equals_transformers_for_every_layer_and_head(client, app, model_id, length):
    """Equal bit for bit on a sentence and on as many tokens as the model takes here (up to
    512), and so within REPLAY_MAX_ABS_DIFF["float32"], the bound stated for any machine.
    (Projecting with `hidden @ w.T + b` instead of F.linear put MiniLM 1.5e-6 away.)"""
    loaded = app.state.manager.get(model_id)
    limit = loaded.full_map_tokens
    text = TEXT if length == "sentence" else prose(loaded.tokenizer, limit - 4)
    result = run_forward(loaded, text)
    seq = result.seq_len
    assert length == "sentence" or seq > limit - 12
    assert result.stored_maps is None  # kept: hidden states only
    expected = direct_attentions(app, model_id, text)
    for layer in range(loaded.arch.num_layers):
        diff = (result.layer_maps(layer) - expected[layer]).abs().max()
        assert diff == 0 < REPLAY_MAX_ABS_DIFF["float32"], f"{model_id} layer {layer}: {diff}"
        head = layer % loaded.arch.num_heads  # one head alone: the same values
        assert torch.equal(result.head_map(layer, head), result.layer_maps(layer)[head])
    if model_id == SMOLLM2_ID:  # a Llama-family replay is bit-exact (measured)
        assert torch.equal(result.all_maps(), expected)
    lab = lab_layer(loaded, result, 0)  # the lab's pages read the same capture, in float32
    assert torch.equal(lab.weights().cpu(), result.layer_maps(0))


def test_replay_scale_matches_the_models_own_modules(app):
    for model_id in REPLAYED:
        loaded = app.state.manager.get(model_id)
        if loaded.family is not Family.OTHER:  # named by hand for three families: the same
            modules = families.attention_modules(loaded.model, loaded.family)
            assert modules == loaded.attention_layers  # what the capture path found, in order
        result = run_forward(loaded, TEXT)
        for layer, module in enumerate(loaded.attention_layers):
            own = getattr(module, "scaling", None)  # T5 keeps none: its scale is 1
            own = 1.0 if own is None and model_id == "local/t5-tiny" else own
            assert lab_layer(loaded, result, layer).captured.scale == pytest.approx(own)


def test_gpt2_inverse_layer_scale_is_replayed(app):
    loaded = app.state.manager.get("local/gpt2-inverse-layer")
    result = run_forward(loaded, TEXT)
    first, second = (lab_layer(loaded, result, i).captured.scale for i in (0, 1))
    assert second == pytest.approx(first / 2)


def test_smollm2_is_gqa_and_detail_reports_shared_kv_heads(client):
    models = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    client.post("/api/attention", json={"model": SMOLLM2_ID, "text": "Hi", "layers": [0]})
    models = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    smol = models[SMOLLM2_ID]
    assert (smol["num_layers"], smol["num_heads"], smol["num_kv_heads"]) == (30, 9, 3)
    assert smol["causal"] and smol["family"] == "llama" and smol["loaded"]
    details = [
        client.post(
            "/api/attention/detail",
            json={"model": SMOLLM2_ID, "text": TEXT, "layer": 3, "head": h},
        ).json()
        for h in (0, 2, 3)
    ]
    assert [d["kv_head"] for d in details] == [0, 0, 1]
    assert details[0]["k"] == details[1]["k"]  # heads 0 and 2 read the same keys
    assert details[0]["k"] != details[2]["k"]


@pytest.mark.parametrize("model_id", [MINILM_ID, SMOLLM2_ID, "local/gpt2-tiny"])
def test_detail_is_consistent_and_counterfactual_is_sharper(client, model_id):
    body = {"model": model_id, "text": TEXT, "layer": 1, "head": 2, "query": 4, "scale": False}
    detail = client.post("/api/attention/detail", json=body).json()
    maps = client.post(
        "/api/attention", json={"model": model_id, "text": TEXT, "layers": [1], "heads": [2]}
    ).json()
    assert torch.equal(torch.tensor(detail["weights"]), torch.tensor(maps["attentions"][0][0]))
    assert detail["replay_max_abs_diff"] < 1e-5
    q, k = torch.tensor(detail["q"]), torch.tensor(detail["k"])
    scores = torch.tensor(detail["scores"])
    assert torch.allclose(q @ k.T, scores, atol=1e-4)
    assert torch.allclose(scores * detail["model_scale"], torch.tensor(detail["scaled_scores"]))
    products = torch.tensor(detail["products"])
    assert torch.allclose(products.sum(-1), scores[4], atol=1e-4)
    assert detail["counterfactual_scale"] == 1.0
    weights = torch.tensor(detail["weights"])
    unscaled = torch.tensor(detail["counterfactual_weights"])
    assert torch.allclose(unscaled.sum(-1), torch.ones(len(detail["tokens"])), atol=1e-5)
    # Without the 1/sqrt(d) scale the rows are more peaked.
    assert unscaled.max(-1).values.mean() >= weights.max(-1).values.mean()
    if maps["causal"]:
        assert not any(detail["mask"][0][1:])


def test_temperature_counterfactual_flattens(client):
    body = {"model": MINILM_ID, "text": TEXT, "layer": 0, "head": 0, "temperature": 100.0}
    detail = client.post("/api/attention/detail", json=body).json()
    hot = torch.tensor(detail["counterfactual_weights"])
    n = hot.shape[-1]
    assert torch.allclose(hot, torch.full_like(hot, 1 / n), atol=0.05)


def test_bert_head_output_equals_the_models_context_vectors(app, client):
    """The replay's weights × V equals what BertSelfAttention itself outputs for that head."""
    loaded = app.state.manager.get(MINILM_ID)
    module = families.attention_modules(loaded.model, loaded.family)[2]
    captured = {}

    def keep_output(_module, _args, output):
        captured["ctx"] = output[0]  # returns None: the model's output is left alone

    handle = module.register_forward_hook(keep_output)
    try:
        enc = loaded.tokenizer(TEXT, return_tensors="pt")
        with torch.no_grad():
            loaded.model(**enc)
    finally:
        handle.remove()
    context = captured["ctx"][0]  # (T, 384) = heads merged
    detail = client.post(
        "/api/attention/detail", json={"model": MINILM_ID, "text": TEXT, "layer": 2, "head": 5}
    ).json()
    head_dim = detail["head_dim"]
    expected = context[:, 5 * head_dim : 6 * head_dim]
    assert torch.allclose(torch.tensor(detail["output"]), expected, atol=1e-5)
    weights, v = torch.tensor(detail["weights"]), torch.tensor(detail["v"])
    assert torch.allclose(weights @ v, expected, atol=1e-5)
