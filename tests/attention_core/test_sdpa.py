"""Scaled dot-product attention: the seed's worked example and parity with PyTorch's kernel."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_core import causal_mask, scaled_dot_product_attention
from attention_core.sdpa import masked_softmax, resolve_scale

# The 3-token example ("The cat sat", d_k = 2) from shared/seeds/000_*.txt, section
# "Worked Example: 3-Token Sequence". The document rounds by hand to 3 decimals.
SEED_Q = [[1.0, 0.5], [0.3, 1.2], [0.8, 0.6]]
SEED_K = [[1.0, 0.5], [0.4, 1.0], [0.9, 0.3]]
SEED_V = [[0.1, 0.2], [0.5, 0.8], [0.3, 0.1]]
SEED_SCORES = [[1.25, 0.90, 1.05], [0.90, 1.32, 0.63], [1.10, 0.92, 0.90]]
SEED_SCALED = [[0.884, 0.636, 0.742], [0.636, 0.933, 0.446], [0.778, 0.651, 0.636]]
SEED_WEIGHTS = [[0.378, 0.295, 0.327], [0.315, 0.424, 0.260], [0.364, 0.320, 0.316]]
SEED_OUTPUT = [[0.284, 0.345], [0.322, 0.428], [0.291, 0.361]]


def seed_trace():
    q, k, v = (torch.tensor(m, dtype=torch.float64) for m in (SEED_Q, SEED_K, SEED_V))
    return scaled_dot_product_attention(q, k, v)


def test_seed_example_matches_printed_numbers_within_a_thousandth():
    trace = seed_trace()
    for got, printed in [
        (trace.scores, SEED_SCORES),
        (trace.scaled_scores, SEED_SCALED),
        (trace.weights, SEED_WEIGHTS),
        (trace.output, SEED_OUTPUT),
    ]:
        assert torch.allclose(got, torch.tensor(printed, dtype=torch.float64), atol=1e-3)


def test_seed_example_exact_values_are_pinned():
    trace = seed_trace()
    # Computed independently with Python's math module, to 6 decimals.
    expected_weights = torch.tensor(
        [
            [0.377518, 0.294751, 0.327732],
            [0.315259, 0.424274, 0.260467],
            [0.363820, 0.320339, 0.315841],
        ],
        dtype=torch.float64,
    )
    expected_output = torch.tensor(
        [[0.283447, 0.344077], [0.321803, 0.428518], [0.291304, 0.360619]], dtype=torch.float64
    )
    assert torch.allclose(trace.weights, expected_weights, atol=1e-6)
    assert torch.allclose(trace.output, expected_output, atol=1e-6)
    assert trace.scale == pytest.approx(1 / math.sqrt(2))
    assert torch.allclose(trace.scores, torch.tensor(SEED_SCORES, dtype=torch.float64), atol=1e-12)


def test_scale_options():
    assert resolve_scale(True, 16) == 0.25
    assert resolve_scale(None, 16) == 0.25
    assert resolve_scale(False, 16) == 1.0
    assert resolve_scale(0.5, 16) == 0.5
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale"):
            resolve_scale(bad, 16)


def test_temperature_divides_logits():
    q, k, v = torch.randn(3, 5, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 4)
    hot = scaled_dot_product_attention(q, k, v, temperature=2.0)
    manual = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8) / 2.0, dim=-1)
    assert torch.allclose(hot.weights, manual, atol=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        scaled_dot_product_attention(q, k, v, temperature=0.0)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    q_len=st.integers(1, 12),
    k_len=st.integers(1, 12),
    d_k=st.integers(1, 24),
    d_v=st.integers(1, 24),
    use_mask=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_matches_torch_sdpa(batch, heads, q_len, k_len, d_k, d_v, use_mask, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, d_k, generator=g, dtype=dtype)
    k = torch.randn(batch, heads, k_len, d_k, generator=g, dtype=dtype)
    v = torch.randn(batch, heads, k_len, d_v, generator=g, dtype=dtype)
    mask = None
    if use_mask:
        mask = torch.rand(batch, 1, q_len, k_len, generator=g) < 0.7
        mask[..., 0] = True  # torch's kernel gives NaN rows when nothing is allowed
    ours = scaled_dot_product_attention(q, k, v, mask).output
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    assert torch.allclose(ours, theirs, atol=tol, rtol=tol)


@pytest.mark.parametrize("q_len,k_len", [(7, 7), (4, 9), (9, 4)])
def test_causal_matches_torch_is_causal(q_len, k_len):
    q, k, v = (
        torch.randn(2, 3, q_len, 16),
        torch.randn(2, 3, k_len, 16),
        torch.randn(2, 3, k_len, 8),
    )
    ours = scaled_dot_product_attention(q, k, v, causal_mask(q_len, k_len))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(ours.output, theirs, atol=1e-6)
    upper = ~causal_mask(q_len, k_len)
    assert (ours.weights[..., upper] == 0).all()


def test_custom_scale_matches_torch():
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    ours = scaled_dot_product_attention(q, k, v, scale=0.3).output
    assert torch.allclose(ours, F.scaled_dot_product_attention(q, k, v, scale=0.3), atol=1e-6)
    unscaled = scaled_dot_product_attention(q, k, v, scale=False).output
    assert torch.allclose(unscaled, F.scaled_dot_product_attention(q, k, v, scale=1.0), atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 3e-2), (torch.float16, 3e-3)])
def test_low_precision_close_to_torch(dtype, tol):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 10, 16, generator=g).to(dtype) for _ in range(3))
    ours = scaled_dot_product_attention(q, k, v).output
    theirs = F.scaled_dot_product_attention(q, k, v)
    assert ours.dtype == dtype
    assert torch.allclose(ours.float(), theirs.float(), atol=tol)


def test_rows_sum_to_one_and_masked_weights_are_exactly_zero():
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    mask = causal_mask(6)
    trace = scaled_dot_product_attention(q, k, v, mask)
    assert torch.allclose(trace.weights.sum(-1), torch.ones(2, 4, 6), atol=1e-6)
    assert (trace.weights[..., ~mask] == 0).all()
    assert torch.isinf(trace.masked_scores[..., ~mask]).all()
    assert torch.equal(trace.masked_scores[..., mask], trace.scaled_scores[..., mask])


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    trace = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(trace.weights).any()
    assert torch.equal(trace.weights[1], torch.zeros(5))
    assert torch.equal(trace.output[1], torch.zeros(2))
    assert torch.allclose(trace.weights[0].sum(), torch.tensor(1.0))


def test_masked_softmax_without_mask_is_softmax():
    x = torch.randn(4, 7)
    assert torch.equal(masked_softmax(x), torch.softmax(x, -1))


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((3, 4), (3, 5), (3, 2)), r"d_k; got q \(3, 4\) and k \(3, 5\)"),
        (((3, 4), (5, 4), (6, 2)), r"same number of positions; got k \(5, 4\) and v \(6, 2\)"),
        (((4,), (5, 4), (5, 2)), r"q needs at least 2 dims.*\(4,\)"),
        (((2, 3, 4), (3, 5, 4), (3, 5, 2)), "do not broadcast"),
    ],
)
def test_bad_shapes_raise_value_error_naming_them(shapes, match):
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        scaled_dot_product_attention(q, k, v)


def test_bad_mask_raises():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    with pytest.raises(ValueError, match="boolean"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 5))
    with pytest.raises(ValueError, match=r"\(4, 4\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 4, dtype=torch.bool))
