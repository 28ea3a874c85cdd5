"""The course's first two lab pages on a real model (what a head is, one forward pass): every
number checked against transformers itself, hooked here without any app code in between."""

import pytest
import torch

from atlas_engine.schemas.lab_models import MINILM, SMOLLM2

TEXT = "The animal didn't cross the street because it was too tired."
PARIS = "The Eiffel Tower is in the city of"
FLOAT32 = 1e-5  # float32 error on numbers of size ~1-50 (the replay is exact here: 0.0)


def post(client, path, body, status=200):
    response = client.post(f"/api/lab/{path}", json=body)
    assert response.status_code == status, response.text
    return response.json()


def run_hooked(loaded, text, modules, **options):
    """The model over `text`, with what goes in and out of each of `modules` kept:
    ({name: (input, output)}, the model's own output)."""
    kept = {}

    def keep(name):
        def hook(_module, args, output):
            out = output[0] if isinstance(output, tuple) else output
            kept[name] = (args[0][0] if args else None, out[0])

        return hook

    enc = loaded.tokenizer(text, return_tensors="pt")
    enc = {k: v for k, v in enc.items() if k in loaded.forward_inputs}
    handles = [m.register_forward_hook(keep(name)) for name, m in modules.items()]
    try:
        with torch.no_grad():
            out = loaded.model(**enc, **options)
    finally:
        for handle in handles:
            handle.remove()
    return kept, out, enc


def t(x):
    return torch.tensor(x, dtype=torch.float32)


@pytest.mark.parametrize(
    ("model", "layer", "head", "projection"),
    [
        (MINILM, 0, 2, lambda m, layer: m.encoder.layer[layer].attention.output.dense),
        (SMOLLM2, 3, 4, lambda m, layer: m.layers[layer].self_attn.o_proj),
    ],
)
def test_the_heads_joined_and_mixed_by_w_o_are_the_models_attention_output(
    client, app, model, layer, head, projection
):
    body = post(client, "what-a-head-is", {"model": model, "text": TEXT, "layer": layer,
                                           "head": head})  # fmt: skip
    loaded = app.state.manager.get(model)
    kept, out, _ = run_hooked(
        loaded, TEXT, {"o": projection(loaded.model, layer)}, output_attentions=True
    )
    joined, output = kept["o"]  # the heads side by side entering W_O, and W_O's output
    n, hd, heads = len(body["tokens"]), body["head_dim"], body["num_heads"]
    assert t(body["x"]).shape == (n, body["d_model"])
    assert t(body["joined"]).shape == (n, heads * hd) == joined.shape
    assert torch.allclose(t(body["joined"]), joined, atol=FLOAT32, rtol=0)
    assert torch.allclose(t(body["output"]), output, atol=FLOAT32, rtol=0)
    assert torch.allclose(t(body["weights"]), out.attentions[layer][0], atol=1e-6, rtol=0)
    # The chosen head: A_h V_h is its slice of the joined outputs.
    weights, v = t(body["weights"][head]), t(body["v"])
    assert torch.allclose(weights @ v, t(body["head_output"]), atol=FLOAT32)
    assert torch.equal(t(body["joined"])[:, head * hd : (head + 1) * hd], t(body["head_output"]))
    assert t(body["q"]).shape == t(body["k"]).shape == (n, hd)
    assert body["output_max_abs_diff"] < FLOAT32
    assert max(body["weights_max_abs_diff"]) < 1e-6
    assert max(body["head_output_max_abs_diff"]) < FLOAT32
    assert body["scale"] == pytest.approx(hd**-0.5)


def test_smollm2_says_which_kv_head_each_query_head_reads(client):
    body = post(client, "what-a-head-is", {"model": SMOLLM2, "text": TEXT, "layer": 0,
                                           "head": 7})  # fmt: skip
    assert body["kv_head_of"] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert (body["num_heads"], body["num_kv_heads"], body["head_dim"]) == (9, 3, 64)
    assert body["rope"] and body["causal"] and not body["qkv_bias"] and not body["output_bias"]
    weights = t(body["weights"])
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))  # the future is masked
    minilm = post(client, "what-a-head-is", {"model": MINILM, "text": TEXT})
    assert minilm["head"] == 2 and minilm["kv_head_of"] == list(range(12))
    assert minilm["qkv_bias"] and minilm["output_bias"] and not minilm["rope"]


def test_the_next_token_probabilities_are_the_softmax_of_the_models_logits(client, app):
    body = post(client, "forward-pass", {"text": PARIS})
    assert body["model"] == SMOLLM2 and body["no_head"] is None
    loaded = app.state.manager.get(SMOLLM2)
    enc = loaded.tokenizer(PARIS, return_tensors="pt")
    with torch.no_grad():
        logits = loaded.predictor(**enc).logits[0].double()  # (T, vocab), the model's own
    assert body["token_ids"] == enc["input_ids"][0].tolist()
    probs = logits[-1].softmax(dim=-1)
    expected = probs.topk(10)
    got = body["next_token"]
    assert [g["token_id"] for g in got] == expected.indices.tolist()
    assert torch.allclose(
        torch.tensor([g["probability"] for g in got], dtype=torch.float64),
        expected.values,
        atol=1e-6,
        rtol=0,
    )
    assert torch.allclose(
        torch.tensor([g["logit"] for g in got], dtype=torch.float64),
        logits[-1, expected.indices],
        atol=1e-4,
        rtol=0,
    )
    assert got[0]["token"] == "␣Paris" and got[0]["probability"] > 0.5
    assert [g["token_id"] for g in body["top_guess"]] == logits.argmax(dim=-1).tolist()
    assert body["vocab_size"] == logits.shape[-1]


def test_the_residual_stream_norms_are_the_models_hidden_states(client, app):
    body = post(client, "forward-pass", {"model": SMOLLM2, "text": PARIS})
    loaded = app.state.manager.get(SMOLLM2)
    layers = loaded.model.layers
    modules = {f"attn{i}": layer.self_attn.o_proj for i, layer in enumerate(layers)}
    modules |= {f"mlp{i}": layer.mlp for i, layer in enumerate(layers)}
    kept, out, enc = run_hooked(loaded, PARIS, modules, output_hidden_states=True)
    hidden = torch.stack([h[0] for h in out.hidden_states])  # (L + 1, T, D)
    norms = hidden.norm(dim=-1)
    residual = t(body["residual_norms"])
    assert residual.shape == (30, len(body["tokens"]))
    # transformers' hidden_states: the embeddings, then each block's output, but the last
    # entry is after the final norm; the last block's own output is the stream before it.
    assert torch.allclose(t(body["entering_norms"]), norms[0], rtol=1e-5)
    assert torch.allclose(residual[:-1], norms[1:-1], rtol=1e-5)
    assert torch.allclose(t(body["final_norms"]), norms[-1], rtol=1e-5)
    attention = torch.stack([kept[f"attn{i}"][1].norm(dim=-1) for i in range(30)])
    mlp = torch.stack([kept[f"mlp{i}"][1].norm(dim=-1) for i in range(30)])
    assert torch.allclose(t(body["attention_norms"]), attention, rtol=1e-5)
    assert torch.allclose(t(body["mlp_norms"]), mlp, rtol=1e-5)
    # The last block's output is what went in plus what its attention and MLP added.
    last = kept["mlp29"][1] + kept["attn29"][1] + hidden[-2]
    assert torch.allclose(residual[-1], last.norm(dim=-1), rtol=1e-4)
    rows = loaded.model.embed_tokens.weight[enc["input_ids"][0]]
    assert torch.allclose(t(body["embeddings"]), rows[:, :64])
    assert torch.allclose(t(body["embedding_norms"]), rows.norm(dim=-1), rtol=1e-5)


def test_minilm_has_no_lm_head_and_stops_at_its_last_hidden_state(client, app):
    body = post(client, "forward-pass", {"model": MINILM, "text": TEXT})
    assert "no masked-language-model head" in body["no_head"]
    assert body["next_token"] is body["top_guess"] is body["final_norms"] is None
    loaded = app.state.manager.get(MINILM)
    _, out, _ = run_hooked(loaded, TEXT, {}, output_hidden_states=True)
    norms = torch.stack([h[0] for h in out.hidden_states]).norm(dim=-1)  # (7, T)
    assert torch.allclose(t(body["residual_norms"]), norms[1:], rtol=1e-5)
    assert torch.allclose(t(body["entering_norms"]), norms[0], rtol=1e-5)
    assert body["shown_dims"] == 64 and len(body["embeddings"][0]) == 64


LONG = " ".join(["word"] * 80)


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("what-a-head-is", {"model": MINILM, "text": TEXT, "head": 12}, "head [12]"),
        ("what-a-head-is", {"model": SMOLLM2, "text": TEXT, "layer": 30}, "layer [30]"),
        ("what-a-head-is", {"model": MINILM, "text": LONG}, "at most 64"),
        ("what-a-head-is", {"model": MINILM, "text": TEXT, "head": "2"}, "integer"),
        ("forward-pass", {"text": LONG}, "at most 64"),
        ("forward-pass", {"text": "   "}, "text"),
        ("forward-pass", {"text": PARIS, "layer": 3}, "layer"),
    ],
)
def test_bad_lesson_requests_get_a_clear_422(client, path, body, needle):
    assert needle in post(client, path, body, 422)["detail"]


def test_an_unknown_model_is_404_on_both_pages(client):
    for path in ("what-a-head-is", "forward-pass"):
        assert post(client, path, {"model": "no/such-model", "text": TEXT}, 404)["detail"]


@pytest.mark.parametrize(
    "model", ["local/gpt2-tiny", "local/distilbert-tiny", "local/roberta-tiny", "local/qwen2-tiny"]
)
def test_both_lessons_work_on_every_family_atlas_replays(client, model):
    head = post(client, "what-a-head-is", {"model": model, "text": TEXT, "layer": 1, "head": 3})
    assert head["output_max_abs_diff"] < FLOAT32 and max(head["weights_max_abs_diff"]) < 1e-6
    assert max(head["head_output_max_abs_diff"]) < FLOAT32
    passed = post(client, "forward-pass", {"model": model, "text": TEXT})
    assert len(passed["residual_norms"]) == passed["num_layers"] == 2
    assert (passed["next_token"] is None) == (passed["no_head"] is not None)


@pytest.mark.parametrize(
    ("model", "projection", "mlp"),
    [
        ("local/neox-tiny", lambda m, i: m.layers[i].attention.dense, lambda m, i: m.layers[i].mlp),
        ("local/t5-tiny", lambda m, i: m.block[i].layer[0].SelfAttention.o,
         lambda m, i: m.block[i].layer[1].DenseReluDense),
    ],
)  # fmt: skip
def test_any_replayed_architecture_shows_its_heads_and_its_blocks(
    client, app, model, projection, mlp
):
    """GPT-NeoX (attention and MLP side by side) and T5's encoder, by nobody's names but the
    test's: what each block's attention and MLP add, against the modules hooked here."""
    head = post(client, "what-a-head-is", {"model": model, "text": TEXT, "layer": 1, "head": 3})
    assert head["output_max_abs_diff"] < FLOAT32 and max(head["weights_max_abs_diff"]) == 0.0
    body = post(client, "forward-pass", {"model": model, "text": TEXT})
    loaded = app.state.manager.get(model)
    modules = {f"attn{i}": projection(loaded.model, i) for i in range(2)}
    modules |= {f"mlp{i}": mlp(loaded.model, i) for i in range(2)}
    kept, out, _ = run_hooked(loaded, TEXT, modules, output_hidden_states=True)
    norms = torch.stack([h[0] for h in out.hidden_states]).norm(dim=-1)  # (3, T)
    assert torch.allclose(t(body["entering_norms"]), norms[0], rtol=1e-5)
    assert torch.allclose(t(body["residual_norms"])[0], norms[1], rtol=1e-5)
    for name in ("attn", "mlp"):
        want = torch.stack([kept[f"{name}{i}"][1].norm(dim=-1) for i in range(2)])
        got = t(body["attention_norms" if name == "attn" else "mlp_norms"])
        assert torch.allclose(got, want, rtol=1e-5), name
    assert torch.allclose(t(body["final_norms"]), norms[-1], rtol=1e-5)  # after the final norm


def test_a_model_outside_the_interface_is_refused_by_name_on_the_head_pages(client):
    for path in ("what-a-head-is", "heads", "sparse", "rope-head"):
        body = {"model": "local/gptneo-tiny", "text": TEXT}
        detail = post(client, path, body, 422)["detail"]
        assert "cannot replay a head" in detail and "GPTNeoModel" in detail, path
