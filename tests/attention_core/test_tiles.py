"""Deep-zoom tiles: every tile and overview equals the same numbers cut from the full softmax,
while no tile larger than (block, block) is held."""

import pytest
import torch

from attention_core import causal_mask, masked_softmax
from attention_core.tiles import (
    overview,
    pool_weights,
    row_logsumexp,
    row_weights,
    weight_tile,
    window_logsumexp,
)
from tests.support.pooling import block_pool


def full_weights(q, k, causal, factor):
    mask = causal_mask(q.shape[-2]) if causal else None
    return masked_softmax(q @ k.transpose(-2, -1) * factor, mask)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("length", "cell", "block"), [(37, 4, 8), (100, 7, 30), (64, 64, 512)])
def test_tiles_and_overviews_equal_the_full_softmax(causal, length, cell, block):
    g = torch.Generator().manual_seed(length + cell)
    q = torch.randn(3, length, 16, generator=g, dtype=torch.float64) * 2
    k = torch.randn(3, length, 16, generator=g, dtype=torch.float64) * 2
    factor = 16**-0.5
    full = full_weights(q, k, causal, factor)
    lse = row_logsumexp(q, k, causal=causal, factor=factor, block=block)
    torch.testing.assert_close(lse, torch.logsumexp(
        (q @ k.transpose(-2, -1) * factor).masked_fill(
            ~causal_mask(length) if causal else torch.zeros(length, length, dtype=torch.bool),
            float("-inf")), dim=-1))  # fmt: skip
    tile = weight_tile(q, k, lse, (5, 23), (2, 31), causal=causal, factor=factor)
    torch.testing.assert_close(tile, full[..., 5:23, 2:31], rtol=0, atol=1e-12)
    view = overview(q, k, lse, cell, causal=causal, factor=factor, block=block)
    want_max, want_mean = block_pool(full, cell)
    torch.testing.assert_close(view.maximum, want_max, rtol=0, atol=1e-12)
    torch.testing.assert_close(view.mean, want_mean, rtol=0, atol=1e-12)
    step = max(cell, block // cell * cell)
    assert view.max_tile_elements <= step * step


@pytest.mark.parametrize("causal", [True, False])
def test_a_window_of_an_overview_is_the_same_window_of_the_weights(causal):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 90, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 90, 8, generator=g, dtype=torch.float64)
    full = full_weights(q, k, causal, 0.5)
    lse = row_logsumexp(q, k, causal=causal, factor=0.5)
    view = overview(q, k, lse, 3, causal=causal, factor=0.5, rows=(31, 80), cols=(7, 60), block=9)
    want_max, want_mean = block_pool(full[..., 31:80, 7:60], 3)
    torch.testing.assert_close(view.maximum, want_max, rtol=0, atol=1e-12)
    torch.testing.assert_close(view.mean, want_mean, rtol=0, atol=1e-12)


def test_every_row_of_an_overview_of_means_sums_to_its_share():
    """Each overview row's means times the block sizes add up to the rows' total weight."""
    q, k = torch.randn(2, 50, 8, dtype=torch.float64), torch.randn(2, 50, 8, dtype=torch.float64)
    lse = row_logsumexp(q, k, causal=True, factor=1.0, block=16)
    view = overview(q, k, lse, 10, causal=True, factor=1.0, block=20)
    assert torch.allclose(
        view.mean.sum(-1) * 10 * 10, torch.full((2, 5), 10.0, dtype=torch.float64)
    )


def test_a_cell_below_one_is_refused():
    q = torch.randn(1, 4, 2)
    with pytest.raises(ValueError, match="cell must be >= 1"):
        overview(q, q, torch.zeros(1, 4), 0, causal=False, factor=1.0)
    with pytest.raises(ValueError, match="cell must be >= 1"):
        pool_weights(q, 0)
    with pytest.raises(ValueError, match="reduce must be"):
        pool_weights(q, 2, "median")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("length", "cell"), [(37, 4), (100, 7), (12, 12), (5, 9), (9, 1)])
def test_pooled_maps_are_the_overview_of_the_same_weights(causal, length, cell):
    """Held maps pooled block by block: each block's max and mean, the short last blocks too,
    equal to the reference and to the overview computed from q and k."""
    g = torch.Generator().manual_seed(length * cell)
    q = torch.randn(2, length, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, length, 8, generator=g, dtype=torch.float64)
    full = full_weights(q, k, causal, 0.5)
    want_max, want_mean = block_pool(full, cell)
    assert torch.equal(pool_weights(full, cell, "max"), want_max)
    torch.testing.assert_close(pool_weights(full, cell, "mean"), want_mean, rtol=0, atol=1e-15)
    view = overview(q, k, row_logsumexp(q, k, causal=causal, factor=0.5), cell, causal=causal,
                    factor=0.5)  # fmt: skip
    torch.testing.assert_close(pool_weights(full, cell, "max"), view.maximum, rtol=0, atol=1e-12)
    torch.testing.assert_close(pool_weights(full, cell, "mean"), view.mean, rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("rows", "block"), [((0, 100), 16), ((37, 61), 8), ((99, 100), 256)])
def test_a_windows_log_sum_exp_is_those_rows_of_the_whole(causal, rows, block):
    """What a zoomed-in window needs: the same normalisers, for its rows only, with the causal
    mask counted from each row's true position."""
    g = torch.Generator().manual_seed(rows[0])
    q = torch.randn(2, 100, 8, generator=g, dtype=torch.float64) * 3
    k = torch.randn(2, 100, 8, generator=g, dtype=torch.float64) * 3
    whole = row_logsumexp(q, k, causal=causal, factor=0.4)
    window = window_logsumexp(q, k, rows, causal=causal, factor=0.4, block=block)
    torch.testing.assert_close(window, whole[:, rows[0] : rows[1]], rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rows", [(0, 1), (0, 40), (17, 29), (39, 40)])
def test_whole_rows_are_those_rows_of_the_softmax(causal, rows):
    """A block of whole rows, as head statistics walk a long map: equal to the full softmax's
    rows, and for causal maps stopped after the block's last row (every later weight is 0)."""
    g = torch.Generator().manual_seed(rows[1])
    q = torch.randn(3, 40, 8, generator=g, dtype=torch.float64) * 3
    k = torch.randn(3, 40, 8, generator=g, dtype=torch.float64) * 3
    full = full_weights(q, k, causal, 0.3)
    block = row_weights(q, k, rows, causal=causal, factor=0.3)
    keys = rows[1] if causal else 40
    assert block.shape == (3, rows[1] - rows[0], keys)
    torch.testing.assert_close(block, full[:, rows[0] : rows[1], :keys], rtol=0, atol=1e-12)
    assert not full[:, rows[0] : rows[1], keys:].any()


@pytest.mark.parametrize("causal", [True, False])
def test_a_caller_is_called_before_every_tile_and_can_stop_the_work(causal):
    """between_tiles runs before each tile of the normalisers and of the overview (a server's
    point to stop or let other work in), changes no number, and what it raises ends the work."""
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 70, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 70, 8, generator=g, dtype=torch.float64)
    calls = []
    lse = window_logsumexp(
        q, k, (0, 70), causal=causal, factor=0.5, block=16, between_tiles=lambda: calls.append(1)
    )
    tiles = sum(range(1, 6)) if causal else 5 * 5  # 5 row blocks of 16; causal: keys to the row
    assert len(calls) == tiles
    assert torch.equal(lse, window_logsumexp(q, k, (0, 70), causal=causal, factor=0.5, block=16))
    calls.clear()
    view = overview(
        q, k, lse, 2, causal=causal, factor=0.5, block=32, between_tiles=lambda: calls.append(1)
    )
    assert len(calls) == (sum(range(1, 4)) if causal else 3 * 3)  # tiles of 32 over 70 tokens
    plain = overview(q, k, lse, 2, causal=causal, factor=0.5, block=32)
    assert torch.equal(view.maximum, plain.maximum) and torch.equal(view.mean, plain.mean)

    class Stop(Exception):
        pass

    def stop_at_third():
        calls.append(1)
        if len(calls) == 3:
            raise Stop

    calls.clear()
    with pytest.raises(Stop):
        overview(q, k, lse, 2, causal=causal, factor=0.5, block=32, between_tiles=stop_at_third)
    assert len(calls) == 3


def test_a_row_with_no_allowed_key_has_no_weight_in_a_tile():
    """A row whose normaliser is -inf (no key allowed) reads 0 everywhere, not exp(+inf)."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 12, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 12, 4, generator=g, dtype=torch.float64)
    lse = row_logsumexp(q, k, causal=False, factor=0.5)
    lse[1, 3] = float("-inf")
    tile = weight_tile(q, k, lse, (2, 6), (0, 12), causal=False, factor=0.5)
    assert torch.equal(tile[1, 1], torch.zeros(12))
    full = full_weights(q, k, False, 0.5)
    torch.testing.assert_close(tile[0], full[0, 2:6], rtol=0, atol=1e-12)
    torch.testing.assert_close(tile[1, [0, 2, 3]], full[1, [2, 4, 5]], rtol=0, atol=1e-12)
