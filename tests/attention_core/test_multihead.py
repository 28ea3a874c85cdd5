"""Multi-head, GQA, MQA and cross-attention against PyTorch and against each other."""

import pytest
import torch

from attention_core import (
    AttentionProjections,
    causal_mask,
    merge_heads,
    multi_head_attention,
    repeat_kv,
    split_heads,
)


def test_split_and_merge_are_inverse_and_shaped():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(heads[:, 1], x[..., 4:8])
    assert torch.equal(merge_heads(heads), x)
    with pytest.raises(ValueError, match=r"not divisible by 5 heads"):
        split_heads(x, 5)


@pytest.mark.parametrize("causal", [False, True])
def test_mha_matches_torch_multihead_attention(causal):
    d_model, n_heads, seq = 16, 4, 7
    proj = AttentionProjections.random(d_model, n_heads, bias=True, seed=3)
    torch_mha = torch.nn.MultiheadAttention(d_model, n_heads, bias=True, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([proj.w_q, proj.w_k, proj.w_v]))
        torch_mha.in_proj_bias.copy_(torch.cat([proj.b_q, proj.b_k, proj.b_v]))
        torch_mha.out_proj.weight.copy_(proj.w_o)
        torch_mha.out_proj.bias.copy_(proj.b_o)
    x = torch.randn(2, seq, d_model)
    mask = causal_mask(seq) if causal else None
    ours = multi_head_attention(x, None, proj, n_heads, mask=mask)
    # torch's boolean attn_mask uses True = NOT allowed.
    theirs, weights = torch_mha(
        x, x, x, attn_mask=None if mask is None else ~mask, average_attn_weights=False
    )
    assert torch.allclose(ours.output, theirs, atol=1e-5)
    assert torch.allclose(ours.weights, weights, atol=1e-6)


@pytest.mark.parametrize("n_heads,n_kv_heads", [(8, 2), (8, 4), (6, 3), (4, 1)])
def test_gqa_equals_mha_with_repeated_kv_weights(n_heads, n_kv_heads):
    d_model = 4 * n_heads
    head_dim = d_model // n_heads
    gqa = AttentionProjections.random(d_model, n_heads, n_kv_heads, bias=True, seed=5)
    n_rep = n_heads // n_kv_heads

    def repeat_rows(w):
        return w.view(n_kv_heads, head_dim, *w.shape[1:]).repeat_interleave(n_rep, 0).flatten(0, 1)

    mha = AttentionProjections(
        w_q=gqa.w_q, w_k=repeat_rows(gqa.w_k), w_v=repeat_rows(gqa.w_v), w_o=gqa.w_o,
        b_q=gqa.b_q, b_k=repeat_rows(gqa.b_k), b_v=repeat_rows(gqa.b_v), b_o=gqa.b_o,
    )  # fmt: skip
    x = torch.randn(3, 9, d_model)
    ours = multi_head_attention(x, None, gqa, n_heads, n_kv_heads, causal_mask(9))
    reference = multi_head_attention(x, None, mha, n_heads, n_heads, causal_mask(9))
    assert ours.k.shape == (3, n_kv_heads, 9, head_dim)
    assert torch.allclose(ours.output, reference.output, atol=1e-5)
    assert torch.allclose(ours.weights, reference.weights, atol=1e-6)
    # Query heads in one group read the same keys.
    assert torch.equal(repeat_kv(ours.k, n_rep)[:, 0], repeat_kv(ours.k, n_rep)[:, n_rep - 1])


def test_mqa_is_gqa_with_one_kv_head():
    proj = AttentionProjections.random(24, 6, 1, seed=11)
    x = torch.randn(1, 5, 24)
    result = multi_head_attention(x, None, proj, n_heads=6, n_kv_heads=1)
    assert result.k.shape == (1, 1, 5, 4)
    expected = torch.softmax(result.q @ result.k.transpose(-2, -1) / 2.0, -1)  # sqrt(4) = 2
    assert torch.allclose(result.weights, expected, atol=1e-6)


def test_kv_heads_must_divide_heads():
    proj = AttentionProjections.random(24, 6, 2)
    with pytest.raises(ValueError, match="n_kv_heads=4 must divide n_heads=6"):
        multi_head_attention(torch.randn(1, 3, 24), None, proj, 6, 4)


def test_cross_attention_with_different_lengths_and_widths():
    proj = AttentionProjections.random(16, 4, d_kv=10, seed=2)
    decoder = torch.randn(2, 3, 16)
    encoder = torch.randn(2, 11, 10)
    result = multi_head_attention(decoder, encoder, proj, 4)
    assert result.output.shape == (2, 3, 16)
    assert result.weights.shape == (2, 4, 3, 11)
    assert torch.allclose(result.weights.sum(-1), torch.ones(2, 4, 3), atol=1e-6)
    with pytest.raises(ValueError, match="x_kv must be"):
        multi_head_attention(decoder, torch.randn(3, 11, 10), proj, 4)
    with pytest.raises(ValueError, match="do not match"):
        multi_head_attention(decoder, torch.randn(2, 11, 12), proj, 4)
