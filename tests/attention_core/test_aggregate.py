"""Head averages, attention rollout and head similarity on cases computed by hand."""

import pytest
import torch

from attention_core.aggregate import (
    attention_rollout,
    cluster_order,
    head_average,
    head_similarity,
    js_divergence,
)


def test_head_average_is_the_mean_of_the_heads():
    maps = torch.softmax(torch.randn(3, 4, 5, 5), dim=-1)
    average = head_average(maps)
    assert average.shape == (3, 5, 5)
    assert torch.allclose(average[1], maps[1].mean(0))
    assert torch.allclose(average.sum(-1), torch.ones(3, 5))


def test_rollout_of_identity_attention_is_the_identity():
    eye = torch.eye(6).expand(4, 3, 6, 6)
    assert torch.allclose(attention_rollout(eye), torch.eye(6).expand(4, 6, 6))


def test_rollout_by_hand_on_two_tokens():
    # Layer 0: both heads send token 1 entirely to token 0; token 0 attends to itself.
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    maps = a.expand(2, 2, 2, 2).clone()
    rolled = attention_rollout(maps, residual=0.5)
    # A' = 0.5 I + 0.5 A = [[1, 0], [0.5, 0.5]]; after two layers A'^2 = [[1, 0], [0.75, 0.25]].
    assert torch.allclose(rolled[0], torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    assert torch.allclose(rolled[1], torch.tensor([[1.0, 0.0], [0.75, 0.25]]))


def test_rollout_keeps_rows_summing_to_one_and_causal_maps_causal():
    maps = torch.softmax(
        torch.randn(5, 3, 7, 7).masked_fill(~torch.ones(7, 7).tril().bool(), -1e9), -1
    )
    rolled = attention_rollout(maps)
    assert torch.allclose(rolled.sum(-1), torch.ones(5, 7), atol=1e-5)
    assert torch.all(rolled.triu(1).abs() < 1e-6)


def test_rollout_refuses_bad_input():
    with pytest.raises(ValueError, match="residual"):
        attention_rollout(torch.eye(3).expand(1, 1, 3, 3), residual=2)
    with pytest.raises(ValueError, match="layers, heads, seq, seq"):
        attention_rollout(torch.eye(3))


def test_js_divergence_bounds():
    p = torch.tensor([1.0, 0.0])
    q = torch.tensor([0.0, 1.0])
    assert js_divergence(p, q).item() == pytest.approx(1.0)  # disjoint: 1 bit
    assert js_divergence(p, p).item() == pytest.approx(0.0)


def test_identical_heads_are_one_disjoint_heads_zero_and_order_groups_them():
    eye = torch.eye(4)
    shifted = torch.roll(torch.eye(4), 1, dims=1)
    maps = torch.stack([eye, shifted, eye, shifted]).reshape(2, 2, 4, 4)
    similarity = head_similarity(maps)
    assert similarity.shape == (4, 4) and torch.allclose(similarity, similarity.T)
    assert similarity[0, 2] == pytest.approx(1.0) and similarity[1, 3] == pytest.approx(1.0)
    assert similarity[0, 1] == pytest.approx(0.0, abs=1e-6)
    order = cluster_order(similarity)
    assert sorted(order) == [0, 1, 2, 3]
    position = {head: i for i, head in enumerate(order)}
    assert abs(position[0] - position[2]) == 1 and abs(position[1] - position[3]) == 1


def test_pooling_keeps_distributions_and_is_exact_for_short_inputs():
    from attention_core.aggregate import pooled_patterns

    maps = torch.softmax(torch.randn(2, 3, 40, 40), -1)
    assert torch.allclose(pooled_patterns(maps).float(), maps.reshape(6, 40, 40))
    long = torch.softmax(torch.randn(1, 2, 300, 300), -1)
    pooled = pooled_patterns(long)
    assert pooled.shape == (2, 64, 64)
    assert torch.allclose(pooled.sum(-1), torch.ones(2, 64, dtype=torch.float64))


def test_follow_token_reads_its_row_and_column_in_every_head():
    from attention_core.aggregate import follow_token

    maps = torch.softmax(torch.randn(3, 4, 6, 6), -1)
    followed = follow_token(maps, 2)
    assert torch.equal(followed.as_query[1, 3], maps[1, 3, 2])
    assert torch.equal(followed.as_key[0, 1], maps[0, 1, :, 2])
    assert torch.allclose(followed.query_mean[2], maps[2, :, 2].mean(0))
    assert torch.equal(followed.key_max[1], maps[1, :, :, 2].amax(0))
    with pytest.raises(ValueError, match="out of range"):
        follow_token(maps, 6)
