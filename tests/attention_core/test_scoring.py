"""Additive (Bahdanau) and general (Luong) scoring against explicit loops."""

import pytest
import torch

from attention_core import additive_attention, general_attention, scaled_dot_product_attention


def test_additive_matches_a_loop():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 4, generator=g), torch.randn(5, 6, generator=g), torch.randn(5, 2)
    w_q, w_k, v_a = torch.randn(7, 4, generator=g), torch.randn(7, 6, generator=g), torch.randn(7)
    trace = additive_attention(q, k, v, w_q=w_q, w_k=w_k, v_a=v_a)
    out, weights, scores = trace.output, trace.weights, trace.scores
    for i in range(3):
        for j in range(5):
            expected = v_a @ torch.tanh(w_q @ q[i] + w_k @ k[j])
            assert torch.allclose(scores[i, j], expected, atol=1e-5)
    assert torch.allclose(weights, torch.softmax(scores, -1))
    assert torch.allclose(out, weights @ v)


def test_additive_respects_mask_and_checks_shapes():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 2)
    w, v_a = torch.randn(6, 4), torch.randn(6)
    mask = torch.tensor([True, True, False, True, False])
    weights = additive_attention(q, k, v, mask, w_q=w, w_k=w, v_a=v_a).weights
    assert (weights[..., ~mask] == 0).all()
    with pytest.raises(ValueError, match="v_a must be"):
        additive_attention(q, k, v, w_q=w, w_k=w, v_a=torch.randn(5))


def test_general_with_identity_is_unscaled_dot_product():
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 3)
    trace = general_attention(q, k, v, w=torch.eye(8))
    out, weights = trace.output, trace.weights
    reference = scaled_dot_product_attention(q, k, v, scale=False)
    assert torch.allclose(weights, reference.weights, atol=1e-6)
    assert torch.allclose(out, reference.output, atol=1e-6)
    with pytest.raises(ValueError, match=r"w must be \(d_q, d_k\)"):
        general_attention(q, k, v, w=torch.eye(7))
