"""Each head's W_Q, W_K, W_V and W_O read off tiny random checkpoints by replaying their layers
on basis vectors (atlas_engine.inference.head_weights): they give the model's own q, k, v and
output projection at the first position in every tiny family (GQA, GPT-2's Conv1D, post-norm
encoders, q/k norms over a head or over the whole width),
the folded norm is the layer's gain and centring, and a hand-set GPT-2 whose later head's key
reads exactly what an earlier head writes gives that pair the strongest K-composition."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from atlas_engine.inference.head_weights import head_weights, model_composition
from atlas_engine.inference.score_trace import trace_layout, traced_pass
from atlas_engine.models import capture
from attention_core.composition import random_baseline
from tests.support.tiny import DECODERS, ENCODERS, load_folder, load_tiny, save_tiny

pytestmark = pytest.mark.slow

FAMILIES = [*DECODERS, *ENCODERS]  # llama: GQA, gpt2: Conv1D, bert: post-norm, qwen3: q/k norms
TEXT = " the cat sat"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    return {name: load_tiny(name, root / name) for name in FAMILIES}


@pytest.mark.parametrize("name", FAMILIES)
def test_the_weights_give_the_models_own_q_k_v_and_projection(models, name):
    """At the first position (RoPE the identity), q = W_Q h + b_q for the attention's input h,
    and the same for k and v; the heads' outputs through W_O give the projection's output. A
    q/k norm (qwen3) scales each head's q and k by a number of the token's own, so there they
    agree up to one factor per head."""
    loaded = models[name]
    layout = trace_layout(loaded)
    weights = head_weights(loaded, fold_norm=False)
    layers = loaded.arch.num_layers
    assert weights.w_q.shape[:2] == (layers, loaded.arch.num_heads)
    assert weights.w_k.shape[1] == loaded.arch.num_kv_heads
    run = traced_pass(loaded, layout, TEXT, layers - 1)
    for layer in range(layers):
        h = run.hiddens[layer][0, 0].double()  # (d,): the attention's input at position 0
        _, real = capture.capture_batch(run.calls[layer], run.hiddens[layer])
        maps = ((weights.w_q, weights.b_q), (weights.w_k, weights.b_k), (weights.w_v, weights.b_v))
        for which, ((w, b), own) in enumerate(zip(maps, real, strict=True)):
            found = w[layer] @ h + b[layer]  # (heads, hd)
            own = own[0, :, 0].double()
            if layout.roles[layer].inner and which < 2:  # q and k through their norms
                factor = (found * own).sum(-1) / (found * found).sum(-1)  # (heads,)
                found = found * factor[:, None]
            torch.testing.assert_close(found, own, rtol=1e-5, atol=1e-5)
        if layer in run.outs:
            out = run.outs[layer][0, 0].double()  # (heads, hdv)
            projected = run.io[id(layout.roles[layer].projection)][1][0, 0].double()
            found = torch.einsum("hdc,hc->d", weights.w_o[layer], out) + weights.b_o[layer]
            torch.testing.assert_close(found, projected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_the_folded_maps_read_the_stream_through_the_norms_gain_and_centring(models, name):
    loaded = models[name]
    norm = trace_layout(loaded).roles[1].norm_in[1]
    raw, folded = head_weights(loaded, fold_norm=False), head_weights(loaded)
    d = raw.w_q.shape[-1]
    through = norm.linear(torch.eye(d, dtype=torch.float64), torch.ones((), dtype=torch.float64))
    for a, b in ((raw.w_q, folded.w_q), (raw.w_k, folded.w_k), (raw.w_v, folded.w_v)):
        torch.testing.assert_close(b[1], a[1] @ through.T, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(folded.w_o, raw.w_o)


def test_gqa_keys_and_values_are_read_once_per_key_value_head(models):
    weights = head_weights(models["llama"])
    assert weights.group == 2 and weights.w_k.shape[1] == weights.w_v.shape[1] == 2


def test_the_scores_cover_every_earlier_later_pair_once(models):
    found = model_composition(models["llama"])
    assert found is model_composition(models["llama"])  # computed once
    scores = found.composition.scores["k"]
    assert scores.shape == (2, 4, 2, 4)
    assert scores[0, :, 1].isfinite().all()
    assert scores[1].isnan().all() and scores[:, :, 0].isnan().all()


D, HEADS, A, B = 64, 4, 1, 2  # the hand-set pair: head A of layer 0 into head B of layer 1


def key_reads_what_a_head_writes():
    """A 2-layer GPT-2 of random weights, but for: head A of layer 0 reads the token direction
    e and writes direction f (W_OV^A = f e^T), and head B of layer 1 has keys reading f and
    queries reading e (W_QK^B ∝ e f^T), so W_QK^B W_OV^A is W_QK^B's whole norm: K-comp 1;
    e ⊥ f, so Q-comp 0. The input norms' gains are 1 and e, f are centred: folding changes
    nothing of them."""
    torch.manual_seed(0)
    config = tf.GPT2Config(vocab_size=50257, n_positions=16, n_embd=D, n_layer=2, n_head=HEADS)
    model = tf.GPT2LMHeadModel(config)
    hd = D // HEADS
    g = torch.Generator().manual_seed(1)
    e, f = torch.randn(D, generator=g), torch.randn(D, generator=g)
    e, f = e - e.mean(), f - f.mean()
    f = f - (f @ e) / (e @ e) * e  # e ⊥ f, both centred
    u, w, q, k = (torch.randn(hd, generator=g) for _ in range(4))
    with torch.no_grad():
        first, second = model.transformer.h
        for block in (first, second):
            block.ln_1.weight.fill_(1.0)
        columns = lambda part, head: slice(part * D + head * hd, part * D + (head + 1) * hd)  # noqa: E731
        first.attn.c_attn.weight[:, columns(2, A)] = torch.outer(e, u)  # W_V^A^T = e u^T
        first.attn.c_proj.weight[A * hd : (A + 1) * hd] = torch.outer(w, f)  # W_O^A^T = w f^T
        second.attn.c_attn.weight[:, columns(0, B)] = torch.outer(e, q)  # W_Q^B^T = e q^T
        second.attn.c_attn.weight[:, columns(1, B)] = torch.outer(f, k)  # W_K^B^T = f k^T
    return model


def test_a_key_that_reads_what_a_head_writes_is_the_strongest_k_edge(tmp_path):
    save_tiny(key_reads_what_a_head_writes(), tmp_path)
    found = model_composition(load_folder(tmp_path, "handmade"))
    k, q = found.composition.scores["k"], found.composition.scores["q"]
    assert float(k[0, A, 1, B]) == pytest.approx(1.0, abs=1e-4)
    assert float(q[0, A, 1, B]) < 1e-3
    others = k[0, :, 1].clone()
    others[A, B] = float("nan")
    assert float(others.nan_to_num(0).max()) < 0.5
    base = random_baseline(D, D // HEADS)["k"]
    assert found.baseline["k"] == base and float(k[0, A, 1, B]) > 5 * base
