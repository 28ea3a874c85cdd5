"""Tiled (online-softmax), linear and sparse attention against exact references."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_core import (
    bigbird_mask,
    causal_mask,
    linear_attention,
    linear_attention_reference,
    scaled_dot_product_attention,
    sliding_window_mask,
    sparse_attention,
    tiled_attention,
)
from attention_core.linear import linear_attention_weights


@settings(max_examples=40, deadline=None)
@given(
    q_len=st.integers(1, 40),
    k_len=st.integers(1, 40),
    block_q=st.integers(1, 16),
    block_k=st.integers(1, 16),
    causal=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_tiled_equals_exact(q_len, k_len, block_q, block_k, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, q_len, 8, generator=g) * 3  # large scores stress the running max
    k = torch.randn(2, 3, k_len, 8, generator=g) * 3
    v = torch.randn(2, 3, k_len, 5, generator=g)
    mask = causal_mask(q_len, k_len) if causal else None
    exact = scaled_dot_product_attention(q, k, v, mask)
    tiled = tiled_attention(q, k, v, block_q=block_q, block_k=block_k, causal=causal)
    assert torch.allclose(tiled.output, exact.output, atol=1e-5)
    expected_lse = torch.logsumexp(exact.masked_scores, dim=-1)
    assert torch.allclose(tiled.stages["logsumexp"], expected_lse, atol=1e-5)


def test_tiled_reports_its_memory_saving_and_skips_future_blocks():
    q, k, v = torch.randn(1, 1, 256, 16), torch.randn(1, 1, 256, 16), torch.randn(1, 1, 256, 16)
    result = tiled_attention(q, k, v, block_q=32, block_k=64, causal=True)
    assert result.cost.max_block_elements == 32 * 64
    assert result.cost.pairs_full == 256 * 256
    assert result.cost.blocks_computed + result.cost.blocks_skipped == 8 * 4
    assert result.cost.blocks_skipped > 0


def test_tiled_with_boolean_mask_and_fully_masked_rows():
    q, k, v = torch.randn(6, 4), torch.randn(9, 4), torch.randn(9, 3)
    mask = torch.rand(6, 9) < 0.4
    mask[2] = False
    exact = scaled_dot_product_attention(q, k, v, mask)
    tiled = tiled_attention(q, k, v, mask, block_q=4, block_k=2)
    assert torch.allclose(tiled.output, exact.output, atol=1e-5)
    assert torch.equal(tiled.output[2], torch.zeros(3))
    with pytest.raises(ValueError, match="block sizes"):
        tiled_attention(q, k, v, block_q=0)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_equals_its_quadratic_form(causal):
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 3, 17, 8, generator=g, dtype=torch.float64) for _ in range(3))
    fast = linear_attention(q, k, v, causal=causal).output
    slow = linear_attention_reference(q, k, v, causal=causal)
    assert torch.allclose(fast, slow, atol=1e-10)
    weights = linear_attention_weights(q, k, causal=causal)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 17, dtype=torch.float64))
    assert (weights >= 0).all()
    if causal:
        assert (weights[..., ~causal_mask(17)] == 0).all()


@pytest.mark.parametrize(
    "mask_fn",
    [
        lambda n: sliding_window_mask(n, window=2),
        lambda n: bigbird_mask(n, window=1, global_indices=[0], num_random=2, seed=1),
        lambda n: causal_mask(n),
    ],
)
def test_sparse_equals_dense_masked_and_counts_pairs(mask_fn):
    n = 20
    mask = mask_fn(n)
    q, k, v = torch.randn(2, 4, n, 8), torch.randn(2, 4, n, 8), torch.randn(2, 4, n, 6)
    dense = scaled_dot_product_attention(q, k, v, mask)
    sparse = sparse_attention(q, k, v, mask)
    assert torch.allclose(sparse.output, dense.output, atol=1e-5)
    assert torch.allclose(sparse.weights, dense.weights, atol=1e-6)
    assert sparse.cost.pairs_computed == int(mask.sum()) < sparse.cost.pairs_full == n * n


def test_sparse_rejects_wrong_mask():
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"mask must be bool \(4, 4\)"):
        sparse_attention(q, q, q, torch.ones(4, 5, dtype=torch.bool))
