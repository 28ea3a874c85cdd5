"""The projection's vectors are the model's own: q·k·scale is the pre-softmax score whose softmax
is transformers' output_attentions map (after RoPE, under GQA), the output is the head's slice
of o_proj's input; the planes are numpy's SVD of the centred points."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from atlas_engine.inference.forward import run_forward
from atlas_engine.services.projection import head_vectors
from attention_core import normalise_qk
from attention_core.qkspace import pca_2d, qk_space
from tests.support.tiny import load_tiny

TEXT = "The cat sat on the mat because the mat was warm, and the cat sat again."


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("projection")
    return {name: load_tiny(name, root / name) for name in ("llama", "bert")}


def own_pass(loaded, text):
    """transformers' own maps, and each layer's o_proj input (llama) or self-attention output
    (bert: the heads' concatenated outputs, before BertSelfOutput's dense)."""
    inputs = loaded.tokenizer(text, return_tensors="pt")
    kept = {}
    hooks = []
    for index, module in enumerate(loaded.attention_layers):
        if hasattr(module, "o_proj"):
            hooks.append(module.o_proj.register_forward_pre_hook(
                lambda _m, args, i=index: kept.__setitem__(i, args[0][0])))  # fmt: skip
        else:
            hooks.append(module.register_forward_hook(
                lambda _m, _a, out, i=index: kept.__setitem__(i, out[0][0])))  # fmt: skip
    try:
        with torch.inference_mode():
            out = loaded.model(**inputs, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    return out.attentions, kept


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_q_k_scale_is_the_score_behind_transformers_own_map(models, name):
    loaded = models[name]
    attentions, outs = own_pass(loaded, TEXT)
    result = run_forward(loaded, TEXT)
    arch = loaded.arch
    for layer in range(arch.num_layers):
        for head in range(arch.num_heads):
            got = head_vectors(loaded, result, layer, head)
            assert got.kv_head == head // (arch.num_heads // arch.num_kv_heads)
            scores = got.scale * got.q @ got.k.T  # (T, T): pre-softmax
            if loaded.causal:
                t = scores.shape[0]
                scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), -torch.inf)
            want = attentions[layer][0, head]
            torch.testing.assert_close(scores.softmax(-1), want, atol=1e-6, rtol=0)
            assert torch.equal(got.weights, want)  # the replayed map, bit for bit
            hd = got.v.shape[-1]
            own = outs[layer][:, head * hd : (head + 1) * hd]  # (T, hd): this head's slice
            torch.testing.assert_close(got.o, own, atol=1e-6, rtol=0)


def test_gqa_reads_the_query_heads_own_key_head(models):
    loaded = models["llama"]  # 4 query heads, 2 key/value heads
    result = run_forward(loaded, TEXT)
    pair = [head_vectors(loaded, result, 0, h) for h in (2, 3)]
    assert pair[0].kv_head == pair[1].kv_head == 1
    assert torch.equal(pair[0].k, pair[1].k) and torch.equal(pair[0].v, pair[1].v)
    assert not torch.equal(pair[0].q, pair[1].q)


def test_the_planes_are_numpys_svd_of_the_centred_points():
    torch.manual_seed(0)
    q, k = torch.randn(50, 16) * 2 + 1, torch.randn(50, 16)
    space = qk_space(q, k, "pca")
    moved = normalise_qk(q, k)
    joint = torch.cat([moved.queries, moved.keys]).double().numpy()
    centred = joint - joint.mean(0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    want = centred @ vt[:2].T  # (100, 2), up to each axis's sign
    got = torch.cat([space.queries, space.keys]).double().numpy()
    for axis in range(2):
        sign = np.sign(got[:, axis] @ want[:, axis])
        np.testing.assert_allclose(got[:, axis], sign * want[:, axis], atol=1e-4)
    shares = s**2 / (s**2).sum()
    np.testing.assert_allclose(space.explained, shares[:2], atol=1e-6)
    values = torch.randn(40, 8)
    coords, explained = pca_2d(values)
    centred = (values - values.mean(0)).double().numpy()
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(
        np.abs(coords.double().numpy()), np.abs(centred @ vt[:2].T), atol=1e-5
    )
    np.testing.assert_allclose(explained, (s**2 / (s**2).sum())[:2], atol=1e-6)
