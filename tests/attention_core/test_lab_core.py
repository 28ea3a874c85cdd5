"""The pieces the lab pages teach with: tile steps, the sinusoids' shift, RoPE's offsets,
K/V heads pooled for GQA."""

import math

import pytest
import torch

import attention_core as ac
from attention_core.analysis import total_variation


def _qkv(n=11, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True])
def test_each_tile_step_leaves_the_exact_softmax_of_the_keys_seen_so_far(causal):
    q, k, v = _qkv()
    factor = 0.5
    steps = list(ac.tile_steps(q, k, v, causal=causal, factor=factor, block_q=4, block_k=3))
    assert len(steps) == 3 * 4  # ceil(11/4) query blocks x ceil(11/3) key blocks
    for step in steps:
        seen = slice(0, step.k_stop)
        logits = q[step.q_start : step.q_stop] @ k[seen].T * factor
        if causal:
            allowed = ac.causal_mask(11)[step.q_start : step.q_stop, seen]
            logits = logits.masked_fill(~allowed, float("-inf"))
        expected = torch.softmax(logits, -1).nan_to_num(0.0) @ v[seen]
        assert torch.allclose(step.partial_output, expected, atol=1e-12)
        finite = torch.isfinite(step.row_max)
        assert torch.allclose(step.row_max[finite], logits.amax(-1)[finite], atol=1e-12)
    skipped = [s for s in steps if s.skipped]
    assert bool(skipped) == causal
    assert all(s.k_start > s.q_stop - 1 for s in skipped)


def test_a_new_maximum_rescales_the_old_sum_by_exp_of_the_drop():
    q = torch.tensor([[1.0]], dtype=torch.float64)
    k = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    v = torch.tensor([[10.0], [20.0]], dtype=torch.float64)
    first, second = ac.tile_steps(q, k, v, factor=1.0, block_q=1, block_k=1)
    assert first.row_max.item() == 1.0 and first.row_sum.item() == 1.0
    assert second.correction.item() == pytest.approx(math.exp(1.0 - 3.0))
    assert second.row_sum.item() == pytest.approx(math.exp(-2.0) + 1.0)
    assert second.last_for_block and not first.last_for_block


@pytest.mark.parametrize("offset", [1, 3, 17])
def test_a_fixed_matrix_shifts_every_sinusoidal_position_by_the_same_offset(offset):
    d = 16
    pe = ac.sinusoidal_encoding(64 + offset, d).double()
    m = ac.sinusoidal_shift_matrix(offset, d)
    moved = pe[:64] @ m.T
    assert (moved - pe[offset : offset + 64]).abs().max() < 1e-6  # float32 encodings


def test_rope_scores_depend_only_on_the_offset():
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 32, generator=g, dtype=torch.float64)
    s = ac.rope_scores_by_position(q, k, 20)
    for offset in range(-19, 20):
        diagonal = torch.diagonal(s, offset=offset)
        assert (diagonal - diagonal[0]).abs().max() < 1e-9
    assert s[0, 0].item() == pytest.approx(float(q @ k))  # position 0 is not rotated


def test_pooled_kv_heads_average_consecutive_heads_and_mqa_is_one_head():
    w = torch.arange(4 * 2 * 3, dtype=torch.float64).reshape(8, 3)  # 4 heads of dim 2
    pooled = ac.pool_kv_heads(w, 4, 2)
    assert torch.equal(pooled[:2], (w[0:2] + w[2:4]) / 2)
    assert torch.equal(pooled[2:], (w[4:6] + w[6:8]) / 2)
    assert torch.equal(ac.pool_kv_heads(w, 4, 4), w)
    assert torch.equal(ac.pool_kv_heads(w, 4, 1), w.reshape(4, 2, 3).mean(0))
    with pytest.raises(ValueError, match="must divide"):
        ac.pool_kv_heads(w, 4, 3)


def test_total_variation_is_zero_for_equal_rows_and_one_for_disjoint():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    assert total_variation(p, q).tolist() == [0.0, 1.0]
