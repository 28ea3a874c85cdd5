"""Softmax analysis: entropy, effective tokens, Jacobian norm and the sqrt(d_k) argument."""

import math

import pytest
import torch

from attention_core import (
    effective_tokens,
    entropy,
    jacobian_frobenius_norm,
    max_weight,
    score_variance,
    softmax_jacobian,
    softmax_stats,
)


def test_entropy_extremes():
    uniform = torch.full((5,), 0.2)
    one_hot = torch.tensor([0.0, 1.0, 0.0])
    assert entropy(uniform) == pytest.approx(math.log(5))
    assert entropy(one_hot) == 0
    assert effective_tokens(uniform) == pytest.approx(5)
    assert effective_tokens(one_hot) == pytest.approx(1)
    assert max_weight(uniform) == pytest.approx(0.2)


def test_jacobian_matches_autograd_and_the_closed_form_norm():
    logits = torch.randn(7, dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), logits)
    p = torch.softmax(logits, -1)
    assert torch.allclose(softmax_jacobian(p), auto, atol=1e-12)
    assert jacobian_frobenius_norm(p) == pytest.approx(float(auto.norm()), abs=1e-12)
    batch = torch.softmax(torch.randn(3, 4, 9, dtype=torch.float64), -1)
    assert torch.allclose(
        jacobian_frobenius_norm(batch), softmax_jacobian(batch).norm(dim=(-2, -1))
    )


def test_uniform_jacobian_norm():
    n = 10
    assert jacobian_frobenius_norm(torch.full((n,), 1 / n)) == pytest.approx(math.sqrt(n - 1) / n)


def test_score_variance_follows_d_k_unscaled_and_one_scaled():
    result = score_variance([4, 64, 512], n_samples=20000, seed=1)
    for d_k, unscaled, scaled in zip(result.d_k, result.unscaled, result.scaled, strict=True):
        assert unscaled == pytest.approx(d_k, rel=0.06)
        assert scaled == pytest.approx(1.0, rel=0.06)


def test_unscaled_softmax_at_512_is_more_peaked_than_scaled():
    d_k, n_keys = 512, 32
    g = torch.Generator().manual_seed(0)
    q = torch.randn(200, 1, d_k, generator=g)
    k = torch.randn(200, n_keys, d_k, generator=g)
    logits = (q @ k.transpose(-2, -1)).squeeze(1)  # (200, n_keys)
    unscaled = softmax_stats(logits)
    scaled = softmax_stats(logits / math.sqrt(d_k))
    assert unscaled.entropy.mean() < 0.25 * scaled.entropy.mean()
    assert unscaled.max_weight.mean() > 0.9 > scaled.max_weight.mean()
    assert unscaled.jacobian_norm.mean() < scaled.jacobian_norm.mean()


def _exact_jacobian_norm(logits: list[float]) -> float:
    """||diag(p) - p p^T||_F with 50-digit arithmetic (mpmath ships with sympy, torch's dep)."""
    import mpmath

    mpmath.mp.dps = 50
    exps = [mpmath.e ** mpmath.mpf(x) for x in logits]
    total = sum(exps)
    p = [e / total for e in exps]
    square = sum(
        ((p[i] if i == j else 0) - p[i] * p[j]) ** 2 for i in range(len(p)) for j in range(len(p))
    )
    return float(mpmath.sqrt(square))


@pytest.mark.parametrize(
    "logits",
    [
        [20.0, 0.0, 0.0, 0.0],
        [40.0, 0.0, 1.0, -3.0],
        [80.0, 0.0],
        [1.0, 2.0, 0.5, 1.5],
        [0.0, 0.0, 0.0],
        [15.0, 15.0, -10.0],
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_jacobian_norm_keeps_relative_accuracy_when_softmax_saturates(logits, dtype):
    exact = _exact_jacobian_norm(logits)
    got = jacobian_frobenius_norm(torch.softmax(torch.tensor(logits, dtype=dtype), -1)).item()
    tolerance = 1e-5 if dtype is torch.float32 else 1e-12
    assert got == pytest.approx(exact, rel=tolerance)
    assert got > 0


def test_value_weighted_norms_are_each_weighted_value_vectors_length():
    from attention_core.analysis import value_weighted_norms

    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(2, 3, 4, 5, dtype=torch.float64), dim=-1)
    v = torch.randn(2, 3, 5, 7, dtype=torch.float64)
    got = value_weighted_norms(weights, v)
    explicit = torch.stack(
        [torch.stack([(weights[..., i, j, None] * v[..., j, :]).norm(dim=-1) for j in range(5)], -1)
         for i in range(4)], -2,
    )  # fmt: skip
    assert torch.allclose(got, explicit)
    # Known by construction: all the attention on a key whose value is zero moves nothing.
    sink = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    values = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    assert value_weighted_norms(sink, values).tolist() == [[0.0, 0.0], [0.0, 2.5]]
