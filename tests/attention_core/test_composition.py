"""Composition scores from low-rank factors (attention_core.composition) against the d × d
matrices of their definition, and the random baseline."""

from __future__ import annotations

import math

import pytest
import torch

from attention_core.composition import (
    KINDS,
    composition_scores,
    direct_scores,
    random_baseline,
)

L, H, HD, HDV, D = 3, 2, 4, 5, 16


def random_heads(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    draw = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return draw(L, H, HD, D), draw(L, H, HD, D), draw(L, H, HDV, D), draw(L, H, D, HDV)


def test_every_pair_matches_the_d_by_d_definition():
    weights = random_heads()
    found = composition_scores(*weights, dtype=torch.float64)
    for a in range(L):
        for i in range(H):
            for b in range(L):
                for j in range(H):
                    for kind in KINDS:
                        score = float(found.scores[kind][a, i, b, j])
                        if a >= b:
                            assert math.isnan(score)
                            continue
                        want = direct_scores(*weights, (a, i), (b, j))[kind]
                        assert score == pytest.approx(want, rel=1e-6)


def test_gqa_is_mha_with_each_key_value_head_repeated():
    w_q, w_k, w_v, w_o = random_heads(3)
    shared_k, shared_v = w_k[:, :1], w_v[:, :1]  # one key/value head for both query heads
    gqa = composition_scores(w_q, shared_k, shared_v, w_o, dtype=torch.float64).scores
    repeated = composition_scores(
        w_q, shared_k.expand_as(w_k), shared_v.expand_as(w_v), w_o, dtype=torch.float64
    ).scores
    for kind in KINDS:
        torch.testing.assert_close(gqa[kind], repeated[kind], equal_nan=True)
    assert float(gqa["k"][0, 1, 2, 1]) == pytest.approx(
        direct_scores(w_q, shared_k, shared_v, w_o, (0, 1), (2, 1))["k"], rel=1e-6
    )


def test_float32_products_stay_within_a_millionth_or_so():
    weights = random_heads(1)
    exact = composition_scores(*weights, dtype=torch.float64).scores
    fast = composition_scores(*weights, dtype=torch.float32).scores
    for kind in KINDS:
        torch.testing.assert_close(fast[kind], exact[kind], rtol=1e-5, atol=0, equal_nan=True)


def test_q_and_k_composition_differ_by_the_transpose():
    """A later head whose query reads only what an earlier head writes, and whose key reads
    none of it: Q-composition only."""
    w_q, w_k, w_v, w_o = random_heads(2)
    out_space = torch.linalg.qr(w_o[0, 0]).Q  # (D, HDV): what head (0, 0) writes
    w_q[1, 0] = out_space[:, :HD].T * 3.0  # head (1, 0)'s query reads only that space
    w_k[1, 0] = w_k[1, 0] - w_k[1, 0] @ out_space @ out_space.T  # its key reads none of it
    found = composition_scores(w_q, w_k, w_v, w_o, dtype=torch.float64).scores
    assert found["k"][0, 0, 1, 0] < 1e-6  # zero, but for √(float64 rounding)
    assert found["q"][0, 0, 1, 0] > 1.5 * random_baseline(D, HD, HDV)["q"]


def test_the_baseline_is_the_mean_over_random_heads_and_fixed():
    base = random_baseline(64, 8)
    assert base == random_baseline(64, 8)
    for kind in KINDS:
        assert 0.11 < base[kind] < 0.14  # near 1/√64
    assert random_baseline(576, 64)["k"] < random_baseline(64, 32)["k"]


def test_shapes_that_do_not_match_are_refused_by_name():
    w_q, w_k, w_v, w_o = random_heads()
    with pytest.raises(ValueError, match="w_o must be"):
        composition_scores(w_q, w_k, w_v, w_o[..., :-1])


def test_progress_counts_the_pairs_scored_and_ends_at_one():
    """Later layer b scores b earlier layers' heads: after layer b the share is the pairs so
    far, Σ_{c ≤ b} c over Σ_{c < L} c, rising to exactly 1."""
    reported = []
    composition_scores(*random_heads(), progress=reported.append)
    assert reported == [b * (b + 1) / (L * (L - 1)) for b in range(1, L)]
    assert reported[-1] == 1.0
