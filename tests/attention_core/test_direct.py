"""attention_core.direct.AffineNorm against PyTorch's own norms: the scale read back from a
norm's input and output, the norm with that scale frozen, and the norm's true gradient."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attention_core.direct import AffineNorm


def norms(d: int):
    """(PyTorch's module, its AffineNorm) for a LayerNorm and an RMSNorm with random affine
    weights, in float64."""
    g = torch.Generator().manual_seed(0)
    layer = nn.LayerNorm(d, eps=1e-5, dtype=torch.float64)
    rms = nn.RMSNorm(d, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(d, generator=g, dtype=torch.float64))
        layer.bias.copy_(torch.randn(d, generator=g, dtype=torch.float64))
        rms.weight.copy_(torch.randn(d, generator=g, dtype=torch.float64))
    return [
        (layer, AffineNorm(layer.weight.detach(), layer.bias.detach(), centers=True)),
        (rms, AffineNorm(rms.weight.detach(), torch.zeros(d, dtype=torch.float64), centers=False)),
    ]


@pytest.mark.parametrize("which", [0, 1], ids=["LayerNorm", "RMSNorm"])
def test_the_scale_read_back_rebuilds_the_norm_and_its_gradient_is_autograds(which):
    d, t, heads = 24, 7, 5
    module, norm = norms(d)[which]
    x = (torch.randn(t, d, dtype=torch.float64) * 3 + 1).requires_grad_()
    y = module(x)
    s = norm.scale(x.detach(), y.detach())  # (T,)
    torch.testing.assert_close(norm.apply(x.detach(), s), y.detach(), rtol=0, atol=1e-12)
    g = torch.randn(heads, t, d, dtype=torch.float64)  # a cotangent per head
    (want,) = torch.autograd.grad(y, x, g, is_grads_batched=True)
    got = norm.backward(x.detach(), s, g)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    frozen = norm.reads(g, s.unsqueeze(-1))  # the gradient were the scale frozen: not the same
    assert (frozen - want).abs().max() > 1e-3
