"""One call shape and one trace for every variant: the same input gives the same attention."""

import math

import pytest
import torch

import attention_core as ac
from attention_core.masks import MASK_KINDS

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def inputs(n=7, d=4, seed=0, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, d, generator=g, dtype=dtype) for _ in range(3))
    return q.to(device), k.to(device), v.to(device)


def options(variant, d, device="cpu", dtype=torch.float64):
    """Each variant's own parameters, chosen so that it computes scaled dot-product attention
    where it can (general with W = I and the 1/sqrt(d) scale)."""
    if variant == "tiled":
        return {"block_q": 3, "block_k": 2}
    if variant == "general":
        return {"w": torch.eye(d, dtype=dtype, device=device), "scale": 1 / math.sqrt(d)}
    if variant == "additive":
        g = torch.Generator().manual_seed(1)
        w = torch.randn(5, d, generator=g, dtype=dtype).to(device)
        return {"w_q": w, "w_k": w, "v_a": torch.randn(5, generator=g, dtype=dtype).to(device)}
    return {}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_softmax_variants_agree_on_the_same_call(device, causal):
    q, k, v = inputs(device=device)
    mask = ac.build_mask(ac.MaskSpec("sliding_window", window=2), 7, device=device)
    exact = ac.attend("dot", q, k, v, mask, causal=causal, temperature=0.7)
    for variant in ("tiled", "sparse", "general"):
        trace = ac.attend(
            variant, q, k, v, mask, causal=causal, temperature=0.7, **options(variant, 4, device)
        )
        assert trace.variant == variant and trace.temperature == 0.7
        assert trace.output.device == q.device and trace.output.dtype == torch.float64
        torch.testing.assert_close(trace.output, exact.output, rtol=0, atol=1e-12)
        if trace.weights is not None:
            torch.testing.assert_close(trace.weights, exact.weights, rtol=0, atol=1e-12)
    assert exact.cost.pairs_computed == 49
    sparse = ac.attend("sparse", q, k, v, mask, causal=causal)
    allowed = (mask & ac.causal_mask(7, device=device)) if causal else mask
    assert sparse.cost.pairs_computed == int(allowed.sum()) < 49


@pytest.mark.parametrize("variant", ["dot", "tiled", "sparse", "additive", "general"])
def test_the_causal_flag_is_the_causal_mask(variant):
    q, k, v = inputs(n=6, seed=3)
    extra = options(variant, 4)
    by_flag = ac.attend(variant, q, k, v, causal=True, **extra)
    by_mask = ac.attend(variant, q, k, v, ac.causal_mask(6), **extra)
    torch.testing.assert_close(by_flag.output, by_mask.output, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", sorted(ac.VARIANTS))
def test_every_variant_keeps_the_inputs_dtype_and_returns_a_trace(variant, dtype):
    q, k, v = inputs(dtype=dtype)
    trace = ac.attend(variant, q, k, v, **options(variant, 4, dtype=dtype))
    assert isinstance(trace, ac.Trace) and trace.output.shape == (2, 3, 7, 4)
    assert trace.output.dtype == dtype and trace.cost.pairs_full == 49


def test_temperature_divides_the_logits_in_every_softmax_variant():
    q, k, v = inputs(seed=5)
    for variant in ("dot", "tiled", "sparse", "additive", "general"):
        extra = options(variant, 4)
        base = extra.pop("scale", 1.0 if variant == "additive" else 1 / math.sqrt(4))
        hot = ac.attend(variant, q, k, v, scale=base, temperature=2.0, **extra)
        halved = ac.attend(variant, q, k, v, scale=base / 2, **extra)
        torch.testing.assert_close(hot.output, halved.output, rtol=0, atol=1e-12)


def test_linear_attention_refuses_what_it_cannot_do_and_shows_its_stages():
    q, k, v = inputs()
    with pytest.raises(ValueError, match="no mask"):
        ac.attend("linear", q, k, v, ac.causal_mask(7))
    with pytest.raises(ValueError, match="no softmax"):
        ac.attend("linear", q, k, v, temperature=2.0)
    trace = ac.attend("linear", q, k, v, causal=True, implied_weights=True)
    assert trace.stages["kv_state"].shape == (2, 3, 7, 4, 4)
    torch.testing.assert_close(trace.output, trace.weights @ v, rtol=0, atol=1e-12)


def test_scale_is_resolved_in_one_place():
    assert ac.resolve_scale(True, 16) == 0.25 == ac.resolve_scale(None, 16)
    assert ac.resolve_scale(True, 16, default=0.125) == 0.125
    assert ac.resolve_scale(False, 16) == 1.0 and ac.resolve_scale(3, 16) == 3.0
    with pytest.raises(ValueError):
        ac.resolve_scale(-1.0, 16)
    with pytest.raises(ValueError, match="unknown attention variant"):
        ac.attend("fast", *inputs())


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_every_mask_kind_builds_by_name(kind):
    spec = ac.MaskSpec(kind, window=1, custom=[[True] * 5] * 5)
    mask = ac.build_mask(spec, 5)
    assert mask.dtype == torch.bool and mask.shape == (5, 5) and mask.any(dim=-1).all()
    if kind in ("sliding_window", "dilated", "bigbird", "block_sparse", "sliding_window_causal"):
        with pytest.raises(ValueError, match="q_len == k_len"):
            ac.build_mask(spec, 5, 6)
