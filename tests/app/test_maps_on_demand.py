"""Maps computed on demand: a forward pass keeps the hidden states entering each attention block,
not the maps; long texts run with PyTorch's fused attention (no maps at all) and are read a layer
or a window at a time, every route sized before it computes anything."""

import math

import pytest
import torch

from atlas_engine import compute
from atlas_engine.inference import forward
from atlas_engine.inference.forward import ForwardResult, run_forward
from atlas_engine.inference.replay import replayed_qk
from atlas_engine.inference.tokens import token_facts
from atlas_engine.models import capture
from atlas_engine.models.loader import FULL_MAPS_MAX_TOKENS
from atlas_engine.models.placement import REPLAY_MAX_ABS_DIFF
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.services import head_statistics as statistics_service
from atlas_engine.services.head_statistics import rows_per_block
from attention_core import causal_mask
from attention_core.head_stats import ROLES, head_statistics
from bench.compression import prose
from tests.app.test_attention_fidelity import direct_attentions
from tests.support.ndjson import checked_lines

pytestmark = pytest.mark.slow
FORWARD = "/api/attention/forward"
TEXT = "The quick brown fox jumps over the lazy dog because it wants to play."


def test_a_pass_keeps_hidden_states_not_maps(app):
    loaded = app.state.manager.get(SMOLLM2_ID)
    text = prose(loaded.tokenizer, 500)
    result = run_forward(loaded, text)
    arch, seq = loaded.arch, result.seq_len
    assert result.stored_maps is None
    hidden = 4 * arch.num_layers * seq * arch.d_model
    memos = ForwardResult.memo_bytes_for(arch, seq)  # top-k table and statistics, when filled
    calls = result.call_bytes  # RoPE's cos and sin and the positions, shared by every layer
    assert 0 < calls <= 4 * seq * (2 * arch.head_dim + 2)  # cos, sin and int64 positions
    assert result.nbytes == hidden + 4 * seq * arch.d_model + memos + calls  # and the LM head's
    assert result.nbytes <= ForwardResult.nbytes_for(arch, seq, replayed=True)
    before = result.nbytes
    result.top_k(loaded.predictor)
    assert result.nbytes == before  # the memos were counted before they were filled
    maps = 4 * arch.num_layers * arch.num_heads * seq * seq
    assert maps > 7 * result.nbytes  # what a pass held before: 283 MB against 37 MB here


def test_a_long_pass_runs_the_fused_kernel_and_replays_within_the_bound(app, monkeypatch):
    """Above EAGER_LAYER_BYTES the model runs torch's scaled_dot_product_attention (the limit
    is lowered here so a 300-token pass takes that path); the hidden states it leaves differ
    from eager's by rounding, and the replayed maps stay within the stated bound."""
    loaded = app.state.manager.get(SMOLLM2_ID)
    text = prose(loaded.tokenizer, 300)
    calls = []
    fused = torch.nn.functional.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return fused(*args, **kwargs)

    monkeypatch.setattr(forward, "EAGER_LAYER_BYTES", 0)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    steps = []
    result = run_forward(loaded, text, progress=lambda done, of: steps.append((done, of)))
    monkeypatch.undo()
    assert len(calls) == loaded.arch.num_layers  # every layer ran the fused kernel
    assert loaded.model.config._attn_implementation == capture.KEY  # the capture path chose it
    layers = loaded.arch.num_layers
    assert steps == [(i, layers) for i in range(layers)] + [(layers, layers)]
    expected = direct_attentions(app, SMOLLM2_ID, text)
    for layer in range(layers):
        diff = (result.layer_maps(layer) - expected[layer]).abs().max()
        assert diff <= REPLAY_MAX_ABS_DIFF["float32"], (layer, diff)


def _calls(modules: dict) -> tuple[dict[str, int], list]:
    """({name: times called}, hook handles) for the named modules."""
    counts = dict.fromkeys(modules, 0)

    def counter(name):
        def hook(*_):
            counts[name] += 1

        return hook

    return counts, [m.register_forward_hook(counter(n)) for n, m in modules.items()]


@pytest.mark.parametrize("offered", [False, True])
def test_a_pass_over_a_model_without_a_head_ends_at_its_last_attention_block(app, offered):
    """MiniLM has no LM head and its maps are replayed, so nothing after the last attention
    block is wanted: that layer's output projection and MLP never run. Its maps
    are offered to keep_maps (eager) or replayed later, equal either way to the model's own."""
    loaded = app.state.manager.get(MINILM_ID)
    assert forward.ends_after_attention(loaded)
    last = loaded.model.encoder.layer[-1]
    counts, handles = _calls(
        {
            "last attention": last.attention.self,
            "last output projection": last.attention.output,
            "last MLP": last.intermediate,
            "MLP before it": loaded.model.encoder.layer[-2].intermediate,
        }
    )
    kept = {}
    try:
        result = run_forward(
            loaded, TEXT, keep_maps=(lambda i, maps: kept.update({i: maps})) if offered else None
        )
    finally:
        for handle in handles:
            handle.remove()
    assert counts == {
        "last attention": 0,  # stopped before it, or inside it once its maps were offered
        "last output projection": 0,
        "last MLP": 0,
        "MLP before it": 1,
    }
    layers = loaded.arch.num_layers
    assert sorted(kept) == (list(range(layers)) if offered else [])
    expected = direct_attentions(app, MINILM_ID, TEXT)
    for layer in range(layers):
        assert torch.equal(result.layer_maps(layer), expected[layer])
        if offered:
            assert torch.equal(kept[layer], expected[layer])


def test_a_pass_over_a_model_with_a_head_runs_to_the_end(app):
    """SmolLM2's predictions read the last hidden state, so its pass runs every layer whole."""
    loaded = app.state.manager.get(SMOLLM2_ID)
    assert not forward.ends_after_attention(loaded)
    counts, handles = _calls({"last MLP": loaded.model.layers[-1].mlp, "norm": loaded.model.norm})
    try:
        result = run_forward(loaded, TEXT)
    finally:
        for handle in handles:
            handle.remove()
    assert counts == {"last MLP": 1, "norm": 1}
    assert result.last_hidden is not None


def test_limits_the_models_list_states(client):
    models = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    assert models[SMOLLM2_ID]["max_tokens"] == 8192  # its whole context
    assert models[MINILM_ID]["max_tokens"] == 512
    assert models["local/neox-tiny"]["full_map_tokens"] <= FULL_MAPS_MAX_TOKENS
    for model in (models[SMOLLM2_ID], models[MINILM_ID]):
        assert model["full_map_tokens"] == FULL_MAPS_MAX_TOKENS


@pytest.fixture(scope="module")
def long_text(app):
    """About 700 SmolLM2 tokens: over the whole-map limit, under the model's own."""
    return prose(app.state.manager.get(SMOLLM2_ID).tokenizer, 700)


@pytest.fixture(scope="module")
def long_text_maps(app, long_text):
    """transformers' own eager maps of the long text, (layers, heads, seq, seq)."""
    return direct_attentions(app, SMOLLM2_ID, long_text)


def test_routes_that_read_every_map_refuse_a_long_text_saying_where_to_go(client, long_text):
    for route, extra in [
        ("/api/attention/token", {"token": 0}),
        ("/api/attention/detail", {"layer": 0, "head": 0}),
    ]:
        body = {"model": SMOLLM2_ID, "text": long_text, **extra}
        response = client.post(route, json=body)
        assert response.status_code == 422, (route, response.text)
        detail = response.json()["detail"]
        assert f"at most {FULL_MAPS_MAX_TOKENS} tokens" in detail and "tiles" in detail


def test_a_long_text_is_read_a_layer_or_a_window_at_a_time(client, long_text, long_text_maps):
    body = {"model": SMOLLM2_ID, "text": long_text, "layers": [3], "heads": [2], "format": "json"}
    response = client.post("/api/attention", json=body)
    assert response.status_code == 200, response.text
    weights = torch.tensor(response.json()["attentions"])[0, 0]  # (T, T)
    seq = weights.shape[-1]
    assert seq > FULL_MAPS_MAX_TOKENS
    expected = long_text_maps[3, 2]
    assert (weights - expected).abs().max() <= REPLAY_MAX_ABS_DIFF["float32"]
    window = {"model": SMOLLM2_ID, "text": long_text, "layer": 3, "heads": [2]}
    tile = client.post("/api/attention/tiles", json={**window, "rows": [600, 640], "cols": [0, 64]})
    assert tile.status_code == 200, tile.text
    torch.testing.assert_close(
        torch.tensor(tile.json()["values"][0]), weights[600:640, :64], atol=1e-5, rtol=0
    )


def test_head_statistics_of_a_long_text_are_those_of_the_models_own_maps(
    app, client, long_text, long_text_maps, monkeypatch
):
    """Over the whole-map limit, statistics are computed a block of query rows at a time from
    the replayed queries and keys (blocks made small here so the text takes many): the same
    numbers as attention_core's statistics of transformers' eager maps, a layer at a time or
    all at once, and search by role, rank and pair agrees with them."""
    monkeypatch.setattr(statistics_service, "BLOCK_BYTES", 4 * 2**20)
    loaded = app.state.manager.get(SMOLLM2_ID)
    result = run_forward(loaded, long_text)
    expected = head_statistics(long_text_maps, token_facts(loaded, result), causal=True)
    assert result.seq_len > 4 * rows_per_block(loaded.arch.num_heads, result.seq_len)
    body = {"model": SMOLLM2_ID, "text": long_text}
    between = []  # each block is a point where a short job may run (atlas_engine.compute.run_beside)
    monkeypatch.setattr(compute, "run_beside", lambda: between.append(True))
    whole = client.post("/api/attention/heads", json=body)
    assert whole.status_code == 200, whole.text
    blocks = math.ceil(result.seq_len / rows_per_block(loaded.arch.num_heads, result.seq_len))
    assert len(between) >= loaded.arch.num_layers * blocks
    answer = whole.json()
    assert answer["layers"] == list(range(loaded.arch.num_layers))
    for name, grid in answer["statistics"].items():
        got = torch.tensor([[math.nan if v is None else v for v in row] for row in grid])
        torch.testing.assert_close(
            got, expected.values[name], rtol=1e-4, atol=2e-5, equal_nan=True, msg=name
        )
    one = client.post("/api/attention/heads", json={**body, "layers": [18, 2]}).json()
    assert one["layers"] == [18, 2]
    for name in ("induction", "previous", "entropy"):
        assert one["statistics"][name] == [answer["statistics"][name][i] for i in (18, 2)]
    assert one["roles"] == [answer["roles"][i] for i in (18, 2)]

    ranked = client.post(
        "/api/attention/search",
        json={**body, "query": {"kind": "rank", "statistic": "first"}, "limit": 3},
    ).json()["heads"]
    best = expected.values["first"].flatten().topk(3).indices.tolist()
    heads = loaded.arch.num_heads
    assert [(h["layer"], h["head"]) for h in ranked] == [divmod(i, heads) for i in best]
    counts = {
        role: int((expected.values[name] >= threshold).sum())
        for role, (name, threshold) in ROLES.items()
    }
    role = max(counts, key=counts.get)  # the commonest role on this text
    having = client.post(
        "/api/attention/search", json={**body, "query": {"kind": "role", "role": role}}
    ).json()
    assert having["matches"] == counts[role] > 0
    want = long_text_maps[:, :, 650, 0]  # what token 650 gives the first token
    fifth, sixth = want.flatten().topk(6).values[-2:].tolist()
    pair = {"kind": "pair", "source": 650, "target": 0, "above": (fifth + sixth) / 2}
    found = client.post("/api/attention/search", json={**body, "query": pair}).json()
    assert found["matches"] == 5
    for head in found["heads"]:
        assert head["value"] == pytest.approx(float(want[head["layer"], head["head"]]), abs=1e-5)


def test_a_layer_too_large_to_compute_is_refused_before_the_forward_pass(client, app, monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("sized after the forward pass")

    monkeypatch.setattr("atlas_engine.services.passes.run_forward", never)
    text = prose(app.state.manager.get(SMOLLM2_ID).tokenizer, 2400)
    body = {"model": SMOLLM2_ID, "text": text, "layers": [0], "format": "u8"}
    response = client.post("/api/attention", json=body)
    assert response.status_code == 422
    assert "MB of float32 weights" in response.json()["detail"]
    assert (
        "1 head" in response.json()["detail"] or "heads at this length" in response.json()["detail"]
    )


def test_the_forward_route_streams_each_layer_then_the_tokens(client, long_text):
    body = {"model": SMOLLM2_ID, "text": long_text + " A pass of its own."}
    response = client.post(FORWARD, json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = checked_lines(client, FORWARD, response)
    progress, done = lines[:-1], lines[-1]
    assert [line["layer"] for line in progress] == list(range(31))  # 30 layers, then all done
    assert {line["layers"] for line in progress} == {30}
    assert done["event"] == "done" and done["cached"] is False
    assert done["seq_len"] == len(done["tokens"]) > FULL_MAPS_MAX_TOKENS
    assert done["full_map_tokens"] == FULL_MAPS_MAX_TOKENS and done["causal"] is True
    again = checked_lines(client, FORWARD, client.post(FORWARD, json=body))
    assert len(again) == 1 and again[0]["cached"] is True  # windows now cost no forward pass


def test_the_forward_route_refuses_before_streaming(client):
    too_long = {"model": MINILM_ID, "text": "word " * 600}
    response = client.post(FORWARD, json=too_long)
    assert response.status_code == 422 and "at most 512" in response.json()["detail"]
    maps_only = client.post(FORWARD, json={"model": "local/gptneo-tiny", "text": "hi"})
    assert maps_only.status_code == 422 and "not replayed" in maps_only.json()["detail"]


def test_a_whole_context_of_8192_tokens(client, app):
    """A Llama-family model (the tiny Qwen2, whose context is 8,192 tokens: SmolLM2's pass over
    8,192 tokens takes 20 to 80 s here, measured in bench/long_context.py) over its whole
    context: the fused kernel (one eager layer would be 1 GB), then windows of the pass: whole
    rows are distributions, the future is masked, and a whole layer is refused, pointing here."""
    model = "local/qwen2-tiny"
    loaded = app.state.manager.get(model)
    text = prose(loaded.tokenizer, 8194)  # 8,192 tokens: no special tokens added
    body = {"model": model, "text": text}
    done = checked_lines(client, FORWARD, client.post(FORWARD, json=body))[-1]
    assert done["event"] == "done" and done["seq_len"] == 8192 == loaded.max_tokens
    rows = {**body, "layer": 1, "heads": [0, 3], "rows": [8180, 8192], "cols": [0, 8192]}
    answer = client.post("/api/attention/tiles", json=rows)
    assert answer.status_code == 200, answer.text
    weights = torch.tensor(answer.json()["values"])  # (2, 12, 8192)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 12), atol=1e-4, rtol=0)
    assert (weights[:, 0, 8181:] == 0).all() and (weights[:, 0, :8181] > 0).all()
    # The stated bound at the whole context: against the exact (float64) softmax of the same
    # rows, half the bound, leaving the other half for the model's own float32 rounding.
    result = run_forward(loaded, text)
    pair = replayed_qk(model, result.calls, result.hidden_inputs, 1, [0, 3])
    scores = (pair.q[:, 8180:].double() @ pair.k.double().transpose(-2, -1)) * pair.factor
    exact = scores.masked_fill(~causal_mask(12, 8192, offset=8180), float("-inf")).softmax(-1)
    assert (weights.double() - exact).abs().max() <= REPLAY_MAX_ABS_DIFF["float32"] / 2
    overview = {**body, "layer": 0, "heads": [3], "cell": 32, "reduce": "mean"}
    blocks = torch.tensor(client.post("/api/attention/tiles", json=overview).json()["values"][0])
    assert blocks.shape == (256, 256)
    torch.testing.assert_close(blocks.sum(-1) * 32, torch.ones(256), atol=1e-4, rtol=0)
    too_much = client.post("/api/attention", json={**body, "layers": [0], "format": "u8"})
    assert too_much.status_code == 422 and "tiles" in too_much.json()["detail"]
