"""Every pair formula of attention_core.cost equals the count of the mask it describes."""

import pytest

import attention_core as ac
from attention_core.cost import (
    EXACT_KINDS,
    kv_cache_bytes,
    linear_macs,
    pairs,
    sharing_options,
    softmax_macs,
    tiled_score_bytes,
)

SIZES = (1, 2, 3, 7, 16, 33)
PARAMS = (
    {"window": 0, "dilation": 1, "num_random": 0, "block_size": 1, "global_tokens": (0,)},
    {"window": 2, "dilation": 2, "num_random": 3, "block_size": 4, "global_tokens": (0, 5)},
    {"window": 5, "dilation": 3, "num_random": 40, "block_size": 5, "global_tokens": (1, 2, 6)},
    {"window": 40, "dilation": 7, "num_random": 1, "block_size": 50, "global_tokens": (3,)},
)


def _spec(kind, p, n):
    globals_in = tuple(g for g in p["global_tokens"] if g < n) or (0,)
    return ac.MaskSpec(
        kind=kind,
        window=p["window"],
        dilation=p["dilation"],
        global_tokens=globals_in,
        num_random=p["num_random"],
        block_size=p["block_size"],
    ), len(globals_in)


@pytest.mark.parametrize("kind", EXACT_KINDS)
@pytest.mark.parametrize("p", PARAMS)
@pytest.mark.parametrize("n", SIZES)
def test_each_exact_formula_counts_the_pairs_its_mask_allows(kind, p, n):
    spec, g = _spec(kind, p, n)
    built = int(ac.build_mask(spec, n).sum())
    counted = pairs(
        kind, n, window=p["window"], dilation=p["dilation"], n_global=g,
        num_random=p["num_random"], block_size=p["block_size"],
    )  # fmt: skip
    assert counted == built


@pytest.mark.parametrize("p", PARAMS)
@pytest.mark.parametrize("n", SIZES)
def test_the_bigbird_count_bounds_its_mask_from_above(p, n):
    spec, g = _spec("bigbird", p, n)
    built = int(ac.build_mask(spec, n).sum())
    bound = pairs("bigbird", n, window=p["window"], n_global=g, num_random=p["num_random"])
    assert built <= bound <= n * n


def test_a_million_tokens_cost_nothing_to_count():
    n = 10**6
    assert pairs("none", n) == 10**12
    assert pairs("causal", n) == n * (n + 1) // 2
    assert pairs("sliding_window", n, window=256) == n * 513 - 256 * 257
    assert softmax_macs(pairs("none", n), 64, 64) == 128 * 10**12
    assert linear_macs(n, 64, 64) == 2 * n * 64 * 64 + 2 * n * 64


def test_tiled_memory_is_one_block_and_kv_cache_counts_keys_and_values():
    assert tiled_score_bytes(10**6, 128, 64, 2) == 128 * 64 * 2
    assert tiled_score_bytes(10, 128, 64, 4) == 10 * 10 * 4
    # SmolLM2-135M: 30 layers, 3 K/V heads of 64 dims, 16-bit: 23,040 bytes a token.
    assert kv_cache_bytes(1, layers=30, kv_heads=3, head_dim=64, bytes_per_value=2) == 23_040
    assert kv_cache_bytes(8192, layers=30, kv_heads=9, head_dim=64) == 3 * 23_040 * 8192


def test_sharing_options_are_the_divisors_from_mha_down_to_mqa():
    assert list(sharing_options(12)) == [12, 6, 4, 3, 2, 1]
    assert list(sharing_options(9)) == [9, 3, 1]


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="no pair formula"):
        pairs("custom", 4)
