"""The background notes' worked examples, recomputed. Where a note prints a wrong number the
test pins the right one and says so."""

import math

import pytest
import torch

import attention_core as ac
from attention_core.cost import pairs, score_bytes, softmax_macs


def softmax(xs):
    return torch.softmax(torch.tensor(xs, dtype=torch.float64), -1)


def test_the_three_token_example_weights_and_outputs():
    q = torch.tensor([[1.0, 0.5], [0.3, 1.2], [0.8, 0.6]], dtype=torch.float64)
    k = torch.tensor([[1.0, 0.5], [0.4, 1.0], [0.9, 0.3]], dtype=torch.float64)
    v = torch.tensor([[0.1, 0.2], [0.5, 0.8], [0.3, 0.1]], dtype=torch.float64)
    trace = ac.scaled_dot_product_attention(q, k, v)
    printed_scores = [[1.25, 0.90, 1.05], [0.90, 1.32, 0.63], [1.10, 0.92, 0.90]]
    assert torch.allclose(trace.scores, torch.tensor(printed_scores, dtype=torch.float64))
    # The note rounds its exponentials to 3 places before dividing: within 1e-3 of exact.
    printed_weights = [[0.378, 0.295, 0.327], [0.315, 0.424, 0.260], [0.364, 0.320, 0.316]]
    assert torch.allclose(trace.weights, torch.tensor(printed_weights).double(), atol=1e-3)
    printed_output = [[0.284, 0.345], [0.322, 0.428], [0.291, 0.361]]
    assert torch.allclose(trace.output, torch.tensor(printed_output).double(), atol=1.5e-3)


def test_softmax_of_one_two_half_one_and_a_half_the_note_prints_a_sum_of_1_10():
    w = softmax([1.0, 2.0, 0.5, 1.5])
    assert w.tolist() == pytest.approx([0.1674, 0.4551, 0.1015, 0.2760], abs=5e-5)
    assert sum([0.1863, 0.5064, 0.1130, 0.2943]) == pytest.approx(1.10, abs=1e-3)  # the note's


def test_eight_times_the_logits_leaves_the_third_best_with_0_0180_not_0_0004():
    w = softmax([8.0, 16.0, 4.0, 12.0])
    assert w.tolist() == pytest.approx([0.000329, 0.981684, 0.0000060, 0.017980], abs=2e-6)


def test_masking_with_zero_instead_of_minus_infinity_leaks_weight():
    leaked = softmax([1.0, 2.0, 0.0, 0.0])  # the note prints [0.091, 0.247, 0.091, 0.091]
    assert leaked.tolist() == pytest.approx([0.2245, 0.6103, 0.0826, 0.0826], abs=5e-5)
    masked = softmax([1.0, 2.0, -math.inf, -math.inf])
    assert masked.tolist() == pytest.approx([0.2689, 0.7311, 0.0, 0.0], abs=5e-5)


def test_the_four_token_example_row_zero():
    assert softmax([1.0, 1.0, 0.0, 0.0]).tolist() == pytest.approx(
        [0.366, 0.366, 0.134, 0.134], abs=5e-4
    )


def test_standard_deviation_of_q_dot_k_is_root_d_k():
    assert math.sqrt(64) == 8
    assert math.sqrt(512) == pytest.approx(22.627, abs=5e-4)  # "about 22.7" / "22.6"
    variance = ac.score_variance([64, 512], n_samples=4096, seed=0)
    assert variance.unscaled[0] == pytest.approx(64, rel=0.1)
    assert variance.unscaled[1] == pytest.approx(512, rel=0.1)
    assert variance.scaled == pytest.approx([1.0, 1.0], rel=0.1)


def test_pair_counts_and_memory_of_full_attention():
    assert pairs("none", 512) == 262_144
    assert pairs("none", 2048) == 4_194_304
    assert pairs("none", 8192) == 67_108_864  # "about 67M"
    assert pairs("none", 128_000) == 16_384_000_000  # "about 16.4B"
    assert pairs("none", 10**6) == 10**12  # "1T"
    assert score_bytes(pairs("none", 128_000), 2) == 32_768_000_000  # "about 32GB", float16
    assert softmax_macs(pairs("none", 2048), 64, 0) == 268_435_456  # "about 2.68e8" for QK^T


def test_kv_cache_is_two_times_tokens_times_heads_times_head_dim():
    n, h, d_h = 1000, 8, 64
    assert ac.kv_cache_bytes(n, layers=1, kv_heads=h, head_dim=d_h, bytes_per_value=1) == (
        2 * n * h * d_h
    )
    mqa = ac.kv_cache_bytes(n, layers=1, kv_heads=1, head_dim=d_h, bytes_per_value=1)
    gqa = ac.kv_cache_bytes(n, layers=1, kv_heads=2, head_dim=d_h, bytes_per_value=1)
    assert (mqa, gqa) == (2 * n * d_h, 2 * n * 2 * d_h)  # O(N d_h) and O(N g d_h)
