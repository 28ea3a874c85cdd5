"""attention_core.marked: each head's share of attention on marked tokens, block by block."""

import itertools
import math

import pytest
import torch

from attention_core.marked import MarkedShare, marked_share


def causal_maps(heads: int, seq: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(heads, seq, seq, generator=generator, dtype=torch.float64) * 3
    above = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    return scores.masked_fill(above, -math.inf).softmax(-1)


def by_hand(maps: torch.Tensor, marked: list[int], causal: bool) -> list[float]:
    """The definition, a row and a key at a time."""
    heads, seq, _ = maps.shape
    rows = [q for q in range(seq) if q not in marked and (not causal or q > min(marked))]
    return [
        sum(sum(float(maps[h, q, k]) for k in marked) for q in rows) / len(rows)
        for h in range(heads)
    ]


def mask(seq: int, marked: list[int]) -> torch.Tensor:
    out = torch.zeros(seq, dtype=torch.bool)
    out[marked] = True
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_the_share_is_the_mean_over_rows_that_read_the_marked_tokens_from_elsewhere(causal):
    maps = causal_maps(3, 23) if causal else torch.rand(3, 23, 23, dtype=torch.float64).softmax(-1)
    marked = [5, 6, 7, 15]
    got = marked_share([(0, maps)], mask(23, marked), causal=causal)
    assert got.dtype == torch.float32
    assert got.tolist() == pytest.approx(by_hand(maps, marked, causal), abs=1e-6)


def test_blocks_of_rows_with_causal_keys_cut_after_their_last_row_give_the_whole_maps_answer():
    maps = causal_maps(4, 40, seed=3)
    marked = mask(40, [2, 3, 30])
    whole = marked_share([(0, maps)], marked, causal=True)
    starts = [0, 7, 8, 21, 39, 40]  # uneven blocks, one of a single row
    blocks = [(a, maps[:, a:b, :b]) for a, b in itertools.pairwise(starts)]
    assert torch.allclose(marked_share(blocks, marked, causal=True), whole, atol=1e-7)


def test_a_head_that_reads_only_the_marked_token_scores_one_and_a_local_head_zero():
    seq = 12
    reader = torch.zeros(seq, seq, dtype=torch.float64)
    reader[:, 0] = 1  # every row on token 0 (rows before it cannot exist)
    reader[0, 0] = 1
    local = torch.eye(seq, dtype=torch.float64)  # each row on itself
    got = marked_share([(0, torch.stack([reader, local]))], mask(seq, [0]), causal=True)
    assert got.tolist() == [1.0, 0.0]


def test_no_row_that_qualifies_gives_nan_for_every_head():
    maps = causal_maps(2, 6)
    last = marked_share([(0, maps)], mask(6, [5]), causal=True)  # no row after the last token
    assert all(math.isnan(v) for v in last.tolist())
    nothing = marked_share([(0, maps)], mask(6, []), causal=True)
    assert all(math.isnan(v) for v in nothing.tolist())
    everything = marked_share([(0, maps)], mask(6, list(range(6))), causal=False)
    assert all(math.isnan(v) for v in everything.tolist())


def test_a_block_outside_the_text_or_a_mask_that_is_not_bool_is_refused():
    with pytest.raises(ValueError, match="bool"):
        MarkedShare(torch.zeros(5), 1, causal=True)
    share = MarkedShare(mask(5, [1]), 1, causal=True)
    with pytest.raises(ValueError, match="exceed"):
        share.add(3, causal_maps(1, 5)[:, :3])
    with pytest.raises(ValueError, match="2 heads"):
        share.add(0, causal_maps(2, 5))
    assert marked_share([], mask(5, [1]), causal=True).shape == (0,)


def test_the_span_is_the_rows_that_can_count_and_those_rows_alone_give_the_answer():
    maps = causal_maps(2, 20, seed=7)
    marked = mask(20, [4, 5])
    last = mask(20, [12, 19])
    assert MarkedShare(marked, 2, causal=True).span() == (5, 20)
    assert MarkedShare(marked, 2, causal=False).span() == (0, 20)
    assert MarkedShare(marked, 2, causal=True, readers=last).span() == (12, 20)
    assert MarkedShare(mask(20, []), 2, causal=True).span() is None
    share = MarkedShare(marked, 2, causal=True, readers=last)
    share.add(12, maps[:, 12:20, :20])  # only the span's rows
    whole = marked_share([(0, maps)], marked, causal=True, readers=last)
    assert torch.allclose(share.values(), whole)
    nothing_after = MarkedShare(mask(20, [19]), 2, causal=True)  # no row after the last token
    assert nothing_after.span() == (20, 20)
    assert all(math.isnan(v) for v in nothing_after.values().tolist())  # no block: NaN


def test_chosen_reader_rows_are_averaged_instead_marked_or_not():
    maps = causal_maps(3, 30, seed=5)
    marked = [4, 5, 6]
    last = torch.zeros(30, dtype=torch.bool)
    last[-1] = True
    got = marked_share([(0, maps)], mask(30, marked), causal=True, readers=last)
    assert got.tolist() == pytest.approx(maps[:, -1, marked].sum(-1).tolist(), abs=1e-6)
    some = mask(30, [5, 20, 29])  # a marked row among them counts too, when chosen
    blocks = [(0, maps[:, :10, :10]), (10, maps[:, 10:, :])]
    got = marked_share(blocks, mask(30, marked), causal=True, readers=some)
    expected = maps[:, [5, 20, 29]][..., marked].sum(-1).mean(-1)
    assert got.tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    with pytest.raises(ValueError, match="readers"):
        MarkedShare(mask(30, marked), 3, causal=True, readers=mask(29, [1]))
