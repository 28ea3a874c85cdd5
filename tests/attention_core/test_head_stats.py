"""Head statistics and roles on heads built to do each job (the answer known by construction)."""

import math

import pytest
import torch

from attention_core.head_stats import ROLES, STATISTICS, TokenFacts, head_statistics

# A random token sequence repeated: the standard input for induction heads.
IDS = torch.tensor([5, 17, 9, 23, 11, 30, 5, 17, 9, 23, 11, 30])
T = len(IDS)


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
    induction = torch.zeros(T, T, dtype=torch.float64)
    induction[:, 1:] = ((IDS.unsqueeze(1) == IDS.unsqueeze(0))[:, :-1] & (j[:, :-1] < i)).double()
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
