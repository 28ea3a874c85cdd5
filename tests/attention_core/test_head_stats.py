"""Head statistics and roles on heads built to do each job (the answer known by construction)."""

import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch

from attention_core.head_stats import (
    DESCRIPTIONS,
    LABELS,
    LOCAL_REACH,
    ROLES,
    STATISTICS,
    HeadStatistics,
    TokenFacts,
    head_statistics,
    layer_statistics,
    layer_statistics_by_rows,
)
from attention_core.scratch import Scratch

# A random token sequence repeated: the standard input for induction heads.
IDS = torch.tensor([5, 17, 9, 23, 11, 30, 5, 17, 9, 23, 11, 30])
T = len(IDS)


def induction_keys(ids: torch.Tensor) -> torch.Tensor:
    """(T, T) bool, written plainly: key j follows an earlier copy of the query's last two
    tokens (ids[j-1] == ids[i], ids[j-2] == ids[i-1], j-1 < i): a repeated span."""
    n = len(ids)
    keys = torch.zeros(n, n, dtype=torch.bool)
    for i in range(1, n):
        for j in range(2, i + 1):
            keys[i, j] = bool(ids[j - 1] == ids[i] and ids[j - 2] == ids[i - 1])
    return keys


def facts(**changes):
    base = dict(
        special=torch.zeros(T, dtype=torch.bool),
        separator=torch.zeros(T, dtype=torch.bool),
        word=torch.arange(T),
        ids=IDS,
    )
    base.update(changes)
    return TokenFacts(**base)


def causal_rows(rows: torch.Tensor) -> torch.Tensor:
    """Rows normalised over the keys each query may see (j <= i); all-zero rows -> self."""
    rows = rows.tril()
    empty = rows.sum(-1) == 0
    rows = rows + torch.diag(empty.to(rows.dtype))
    return rows / rows.sum(-1, keepdim=True)


def built_heads() -> dict[str, torch.Tensor]:
    i = torch.arange(T).unsqueeze(1)
    j = torch.arange(T).unsqueeze(0)
    previous = (j == i - 1).double()
    first = (j == 0).double().expand(T, T)
    own = (j == i).double()
    broad = torch.ones(T, T, dtype=torch.float64)
    separator = (j == 3).double().expand(T, T)  # token 3 is the separator below
    local = (((i - j).abs() <= 3) & (i != j)).double()
    duplicate = ((IDS.unsqueeze(1) == IDS.unsqueeze(0)) & (j < i)).double()
    induction = induction_keys(IDS).double()
    return {
        "previous-token": previous, "first-token (sink)": first, "self": own, "broad": broad,
        "separator": separator, "local window": local, "duplicate-token": duplicate,
        "induction": induction,
    }  # fmt: skip


@pytest.fixture(scope="module")
def stats():
    heads = built_heads()
    maps = torch.stack([causal_rows(m) for m in heads.values()]).unsqueeze(0).float()
    return list(heads), head_statistics(maps, facts(separator=torch.arange(T) == 3), causal=True)


def test_every_statistic_has_one_number_per_layer_and_head(stats):
    names, result = stats
    assert set(result.values) == set(STATISTICS)
    for values in result.values.values():
        assert values.shape == (1, len(names))


@pytest.mark.parametrize("role", list(ROLES))
def test_a_head_built_for_a_job_is_given_that_role_first(stats, role):
    names, result = stats
    head = names.index(role)
    roles = result.roles(0, head)
    assert roles and roles[0][0] == role, roles
    statistic, threshold = ROLES[role]
    assert roles[0][1] == pytest.approx(float(result.values[statistic][0, head]))
    assert roles[0][1] >= threshold


def test_exact_values_on_known_patterns(stats):
    names, result = stats
    v = result.values
    previous = names.index("previous-token")
    assert v["previous"][0, previous] == pytest.approx(1.0)
    assert v["distance"][0, previous] == pytest.approx((T - 1) / T)  # row 0 attends to itself
    assert v["self"][0, names.index("self")] == pytest.approx(1.0)
    assert v["first"][0, names.index("first-token (sink)")] == pytest.approx(1.0)
    assert v["entropy"][0, names.index("broad")] == pytest.approx(1.0)  # uniform over visible keys
    assert v["entropy"][0, names.index("self")] == pytest.approx(0.0, abs=1e-6)
    assert v["induction"][0, names.index("induction")] == pytest.approx(1.0)
    assert v["duplicate"][0, names.index("duplicate-token")] == pytest.approx(1.0)
    assert v["max_weight"][0, names.index("self")] == pytest.approx(1.0)


def test_same_word_and_special_shares():
    i = torch.arange(6).unsqueeze(1)
    j = torch.arange(6).unsqueeze(0)
    pieces = ((j == i - 1) | (j == i + 1)).double()  # neighbours, both sides
    maps = (pieces / pieces.sum(-1, keepdim=True)).reshape(1, 1, 6, 6).float()
    word = torch.tensor([-1, 0, 0, 1, 1, -1])  # [CLS] un ##believ able ... [SEP]
    special = torch.tensor([True, False, False, False, False, True])
    ids = torch.arange(6)
    result = head_statistics(
        maps, TokenFacts(special, torch.zeros(6, dtype=torch.bool), word, ids), causal=False
    )
    # Rows 1-4 have a same-word neighbour: 1 -> 2 (0.5), 2 -> 1 (0.5), 3 -> 4, 4 -> 3.
    assert result.values["same_word"][0, 0] == pytest.approx(0.5)
    # Special keys: row 1 gives 0.5 to [CLS]; row 4 gives 0.5 to [SEP]; rows 0, 5 give 0.
    assert result.values["special"][0, 0] == pytest.approx(1.0 / 6)
    assert math.isnan(
        head_statistics(maps, TokenFacts(special, special, word, ids), causal=False).values[
            "induction"
        ][0, 0]
    )


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="layers, heads, seq, seq"):
        head_statistics(torch.zeros(2, 3, 4), facts(), causal=True)
    with pytest.raises(ValueError, match=r"facts\.word"):
        head_statistics(torch.zeros(1, 1, T, T), facts(word=torch.zeros(3)), causal=True)


def random_maps(heads: int, seq: int, causal: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(heads, seq, seq, generator=g) * 3
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), -math.inf)
    return scores.softmax(dim=-1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block", [1, 7, 16, 40])
def test_statistics_a_block_of_rows_at_a_time_equal_the_whole_maps(causal, block):
    """How statistics of a text too long to hold its maps are computed: block by block of
    query rows (causal blocks stop their keys after their last row), in any order, the sums
    and counts of each block added up. A text with repeats, words of several pieces and
    special tokens, so every statistic has rows that count and rows that do not."""
    seq = 40
    g = torch.Generator().manual_seed(block)
    ids = torch.randint(0, 12, (seq,), generator=g)
    word = torch.arange(seq) // 3
    word[0] = word[-1] = -1
    token_facts = TokenFacts(special=(word < 0), separator=(ids % 5 == 0), word=word, ids=ids)
    maps = random_maps(4, seq, causal, seed=block)
    whole = layer_statistics(maps, token_facts, causal)
    starts = list(range(0, seq, block))[::-1]  # the order does not matter
    blocks = [
        (r0, maps[:, r0 : min(r0 + block, seq), : (min(r0 + block, seq) if causal else seq)])
        for r0 in starts
    ]
    by_rows = layer_statistics_by_rows(blocks, token_facts, causal)
    for name in STATISTICS:
        torch.testing.assert_close(by_rows[name], whole[name], rtol=1e-5, atol=1e-6, msg=name)
        assert not whole[name].isnan().any(), name
    assert whole["entropy"].shape == (4,)


def test_blocks_that_do_not_cover_the_text_once_are_refused():
    maps = random_maps(2, T, True, seed=0)
    with pytest.raises(ValueError, match="cover 6 rows"):
        layer_statistics_by_rows([(0, maps[:, :6, :6])], facts(), causal=True)
    with pytest.raises(ValueError, match="within 12 rows"):
        layer_statistics_by_rows([(8, maps[:, :6])], facts(), causal=True)


def test_row_entropy_is_the_sum_of_entr_with_zero_weights_adding_nothing():
    """The vectorised entropy (log and product) equals torch.special.entr's sum, on rows with
    exact zeros (causal rows, one-hot rows) and with subnormal weights."""
    from attention_core.head_stats import _row_entropy

    g = torch.Generator().manual_seed(2)
    rows = causal_rows(torch.rand(40, 40, generator=g, dtype=torch.float64) ** 8).float()
    rows[3] = 0
    rows[3, 2] = 1  # one-hot
    rows[5, :3] = torch.tensor([1e-40, 0.5, 0.5 - 1e-40])  # a subnormal weight
    got = _row_entropy(rows)
    want = torch.special.entr(rows).sum(dim=-1)
    assert torch.isfinite(got).all() and got[3] == 0
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_key_sets_over_a_blocks_keys_are_the_whole_texts_cut_to_them():
    """_key_sets builds a block's sets over its keys only: each equals the set built over the
    whole text and cut, and which rows count is decided over the whole text (a word's later
    pieces count for a causal row)."""
    from attention_core.head_stats import _key_sets

    ids = torch.tensor([101, 7, 8, 7, 9, 8, 7, 102, 9, 9, 7, 8])
    word = torch.tensor([-1, 0, 1, 1, 2, 3, 4, 4, 5, 6, 6, -1])  # pieces of words 1, 4 and 6
    text = TokenFacts(
        special=torch.zeros(12, dtype=torch.bool),
        separator=torch.zeros(12, dtype=torch.bool),
        word=word,
        ids=ids,
    )
    i = torch.arange(12).unsqueeze(1)
    j = torch.arange(12).unsqueeze(0)
    same_id = ids.unsqueeze(1) == ids.unsqueeze(0)
    follows = induction_keys(ids)
    whole = {
        "same_word": (word.unsqueeze(1) == word) & (word.unsqueeze(1) >= 0) & (i != j),
        "local": ((i - j).abs() <= LOCAL_REACH) & (i != j) & (j != i - 1),
        "duplicate": same_id & (j < i),
        "induction": follows,
        "distance": (i - j).abs(),
    }
    scratch = Scratch()  # one for every block, as a walk over a map uses it: none sees another's
    for first, stop, keys in [(0, 4, 4), (3, 7, 7), (6, 12, 12), (2, 5, 12), (0, 3, 3)]:
        sets, counted = _key_sets(text, torch.arange(first, stop), keys, scratch)
        for index, name in enumerate(whole):
            want = whole[name][first:stop, :keys].to(torch.float32)
            assert torch.equal(sets[index], want), (name, first, keys)
        for name in ("same_word", "duplicate", "induction"):
            assert torch.equal(counted[name], whole[name][first:stop].any(dim=-1)), name


def test_induction_needs_a_repeated_span_not_a_repeated_word():
    """A word used twice ("the ... the") gives no induction row; a span used twice does, from
    its second token on, and only those rows are averaged."""
    ids = torch.tensor([1, 7, 2, 7, 3, 4, 5, 3, 4, 5])  # 7 twice alone; 3 4 5 twice
    keys = induction_keys(ids)
    assert keys.any(dim=-1).tolist() == [False] * 8 + [True, True]  # rows 8 and 9
    assert [keys[row].nonzero().flatten().tolist() for row in (8, 9)] == [[6], [7]]
    text = TokenFacts(
        special=torch.zeros(10, dtype=torch.bool),
        separator=torch.zeros(10, dtype=torch.bool),
        word=torch.arange(10),
        ids=ids,
    )
    uniform = causal_rows(torch.ones(10, 10, dtype=torch.float64)).float().reshape(1, 1, 10, 10)
    result = head_statistics(uniform, text, causal=True)
    assert float(result.values["induction"][0, 0]) == pytest.approx((1 / 9 + 1 / 10) / 2)
    no_span = dataclasses.replace(text, ids=torch.tensor([1, 7, 2, 7, 3, 4, 5, 6, 8, 9]))
    assert math.isnan(
        float(head_statistics(uniform, no_span, causal=True).values["induction"][0, 0])
    )


def test_the_sink_role_needs_nearly_all_of_each_row_on_the_first_token():
    """Half the attention on the first token is what most heads of a decoder give it on a short
    text; the role needs 0.9, so it names the heads that park nearly everything there."""
    first = torch.zeros(T, T, dtype=torch.float64)
    first[:, 0] = 1
    spread = causal_rows(torch.ones(T, T, dtype=torch.float64))
    half = causal_rows(0.5 * first + 0.5 * spread)  # about 0.6 of each row on the first token
    nearly = causal_rows(0.95 * first + 0.05 * spread)
    maps = torch.stack([half, nearly]).unsqueeze(0).float()
    result = head_statistics(maps, facts(), causal=True)
    assert 0.5 < float(result.values["first"][0, 0]) < 0.9
    assert "first-token (sink)" not in dict(result.roles(0, 0))
    assert dict(result.roles(0, 1))["first-token (sink)"] >= 0.9


def test_the_clearest_head_is_the_largest_multiple_of_its_roles_threshold(stats):
    """Of the heads built for one job each, the sink and broad heads are never chosen; the rest
    score 1.0 each, so a role of the lowest threshold wins (induction's or duplicate's 0.3)."""
    names, result = stats
    best = result.clearest()
    assert best.layer == 0 and best.role in ("duplicate-token", "induction")
    assert best.head == names.index(best.role)
    assert best.margin == pytest.approx(1 / 0.3, rel=1e-5)
    assert result.clearest(layers=[7]).layer == 7
    nothing = HeadStatistics(values={name: torch.full((1, 2), math.nan) for name in STATISTICS})
    assert nothing.clearest() is None


def test_each_statistic_is_described_and_labelled_once_in_one_order():
    assert tuple(DESCRIPTIONS) == tuple(LABELS) == STATISTICS
    assert {statistic for statistic, _ in ROLES.values()} <= set(STATISTICS)


def test_the_role_table_in_the_docs_matches_roles():
    """docs/views.md names each role's statistic and threshold; their meanings stay in code."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "views.md").read_text()
    rows = re.findall(r"^\| ([^|]+?) \| `(\w+)` \| ([\d.]+) \|$", text, re.M)
    assert {role: (statistic, float(t)) for role, statistic, t in rows} == ROLES
