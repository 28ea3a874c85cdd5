"""Sinusoidal encodings and RoPE's relative-position property."""

import math

import pytest
import torch

from attention_core import apply_rope, rope_cos_sin, sinusoidal_encoding


def test_sinusoidal_matches_the_formula():
    pe = sinusoidal_encoding(50, 16)
    assert pe.shape == (50, 16)
    pos, i = 7, 3
    assert pe[pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert torch.equal(pe[0, 0::2], torch.zeros(8)) and torch.equal(pe[0, 1::2], torch.ones(8))
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(4, 7)


def test_rope_preserves_norm():
    x = torch.randn(1, 2, 10, 8)
    cos, sin = rope_cos_sin(torch.arange(10), 8)
    assert torch.allclose(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1), atol=1e-5)


@pytest.mark.parametrize("shift", [1, 5, 100])
def test_rope_dot_product_depends_only_on_the_offset(shift):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, generator=g, dtype=torch.float64)

    def score(m, n):
        cos_m, sin_m = rope_cos_sin(torch.tensor([m]), 16)
        cos_n, sin_n = rope_cos_sin(torch.tensor([n]), 16)
        rq = apply_rope(q, cos_m.double(), sin_m.double())
        rk = apply_rope(k, cos_n.double(), sin_n.double())
        return float((rq * rk).sum())

    for m, n in [(3, 1), (10, 4), (2, 9)]:
        assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)  # and it does depend on the offset
