"""Masks: each pattern by hand, combination with & and |, and rendering."""

import pytest
import torch

from attention_core import (
    bigbird_mask,
    block_sparse_mask,
    causal_mask,
    custom_mask,
    dilated_window_mask,
    global_tokens_mask,
    padding_mask,
    random_mask,
    render_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
)


def as_bool(rows):
    return torch.tensor(rows, dtype=torch.bool)


def test_causal_is_lower_triangular_and_offset_shifts_it():
    assert torch.equal(causal_mask(3), as_bool([[1, 0, 0], [1, 1, 0], [1, 1, 1]]))
    # Two new queries after three cached tokens see everything up to themselves.
    assert torch.equal(causal_mask(2, 5, offset=3), as_bool([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]))


def test_padding_from_attention_mask_and_lengths_agree():
    from_mask = padding_mask(torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]))
    from_lengths = padding_mask(lengths=[3, 2], k_len=4)
    assert from_mask.shape == (2, 1, 1, 4)
    assert torch.equal(from_mask, from_lengths)
    with pytest.raises(ValueError, match="exactly one"):
        padding_mask()
    with pytest.raises(ValueError, match="lengths must lie"):
        padding_mask(lengths=[5], k_len=4)


def test_padding_mask_hides_pad_keys_in_attention():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8)
    trace = scaled_dot_product_attention(q, k, v, padding_mask(lengths=[4, 2]))
    assert (trace.weights[1, :, :, 2:] == 0).all()
    assert torch.allclose(trace.weights[1].sum(-1), torch.ones(3, 4))


def test_sliding_window_both_sides_and_causal():
    assert torch.equal(
        sliding_window_mask(4, window=1),
        as_bool([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]),
    )
    causal = sliding_window_mask(4, window=1, causal=True)
    assert torch.equal(causal, as_bool([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]))
    assert torch.equal(causal, sliding_window_mask(4, window=1) & causal_mask(4))


def test_dilated_window_skips_positions():
    mask = dilated_window_mask(7, window=1, dilation=2)
    assert mask[3].nonzero().flatten().tolist() == [1, 3, 5]
    assert mask[0].nonzero().flatten().tolist() == [0, 2]
    assert torch.equal(
        dilated_window_mask(6, window=2, dilation=1), sliding_window_mask(6, window=2)
    )


def test_global_tokens_rows_and_columns():
    mask = global_tokens_mask(4, indices=[0])
    assert mask[0].all() and mask[:, 0].all()
    assert not mask[1:, 1:].any()
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        global_tokens_mask(4, indices=[4])


def test_random_mask_is_seeded_and_has_exact_count():
    a = random_mask(10, num_random=3, seed=7)
    assert torch.equal(a, random_mask(10, num_random=3, seed=7))
    assert not torch.equal(a, random_mask(10, num_random=3, seed=8))
    assert (a.sum(-1) == 3).all()


def test_bigbird_is_the_union_of_its_parts():
    mask = bigbird_mask(12, window=1, global_indices=[0, 11], num_random=2, seed=3)
    parts = (
        sliding_window_mask(12, window=1)
        | global_tokens_mask(12, indices=[0, 11])
        | random_mask(12, num_random=2, seed=3)
    )
    assert torch.equal(mask, parts)
    assert mask.sum() < 144


def test_block_sparse_default_is_block_diagonal_with_partial_last_block():
    mask = block_sparse_mask(5, block_size=2)
    expected = as_bool(
        [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1]]
    )
    assert torch.equal(mask, expected)
    layout = torch.ones(3, 3, dtype=torch.bool).tril()
    assert torch.equal(block_sparse_mask(6, block_size=2, layout=layout)[5], torch.ones(6).bool())
    with pytest.raises(ValueError, match=r"\(3, 3\)"):
        block_sparse_mask(5, block_size=2, layout=torch.eye(2, dtype=torch.bool))


def test_custom_mask_accepts_bool_and_01_and_rejects_others():
    assert torch.equal(custom_mask([[1, 0], [0, 1]]), torch.eye(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="2-D"):
        custom_mask([1, 0])
    with pytest.raises(ValueError, match="booleans"):
        custom_mask([[0.5, 1.0]])


def test_render_gives_minus_inf_before_and_zero_pattern_after():
    mask = causal_mask(3)
    rendering = render_mask(mask)
    assert torch.isneginf(rendering.additive[~mask]).all()
    assert (rendering.additive[mask] == 0).all()
    assert torch.equal(rendering.pattern, mask.float())
    assert (rendering.computed_pairs, rendering.full_pairs) == (6, 9)
    # Adding the rendered matrix before softmax is the same as applying the mask.
    scores = torch.randn(3, 3)
    via_additive = torch.softmax(scores + rendering.additive, -1)
    q, k = torch.randn(3, 3), torch.randn(3, 3)
    assert torch.allclose(
        torch.softmax(q @ k.T + rendering.additive, -1),
        scaled_dot_product_attention(q, k, torch.eye(3), mask, scale=False).weights,
    )
    assert (via_additive[~mask] == 0).all()
