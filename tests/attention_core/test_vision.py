"""Patch geometry, mean attention distance, rollout and artifact tokens on maps whose answer is
known by hand."""

import math

import pytest
import torch

from attention_core import vision
from attention_core.vision import (
    artifact_tokens,
    attention_received,
    mean_attention_distance,
    patch_centres,
    rollout,
)


def test_patch_centres_are_row_major_half_a_patch_in():
    centres = patch_centres(2, 3, 10)
    expected = [[5, 5], [5, 15], [5, 25], [15, 5], [15, 15], [15, 25]]
    assert torch.equal(centres, torch.tensor(expected, dtype=torch.float32))


def neighbour_pattern(prefix: int, rows: int, cols: int, on_prefix: float) -> torch.Tensor:
    """(1, 1, T, T): each patch puts 1 - on_prefix on the patch to its right (on the left in the
    last column) and on_prefix on the first prefix token; prefix rows attend to themselves."""
    tokens = prefix + rows * cols
    weights = torch.zeros(1, 1, tokens, tokens)
    for p in range(prefix):
        weights[0, 0, p, p] = 1.0
    for r in range(rows):
        for c in range(cols):
            q = prefix + r * cols + c
            k = q + 1 if c + 1 < cols else q - 1
            weights[0, 0, q, k] = 1.0 - on_prefix
            if prefix:
                weights[0, 0, q, 0] = on_prefix
    return weights


def test_attention_one_patch_away_is_one_patch_distant():
    weights = neighbour_pattern(prefix=1, rows=3, cols=4, on_prefix=0.0)
    distance = mean_attention_distance(weights, prefix=1, rows=3, cols=4, patch=14)
    assert distance.shape == (1, 1)
    assert distance.item() == 14.0


def test_weight_on_the_prefix_is_left_out_and_the_rest_renormalised():
    # Half of every patch's attention on the class token: still one patch away, not half.
    weights = neighbour_pattern(prefix=2, rows=3, cols=4, on_prefix=0.5)
    distance = mean_attention_distance(weights, prefix=2, rows=3, cols=4, patch=14)
    assert distance.item() == pytest.approx(14.0, abs=1e-5)


def test_uniform_attention_is_the_mean_pairwise_distance():
    # A 2 x 2 grid of 1-pixel patches: from any patch the distances are 0, 1, 1 and sqrt 2.
    tokens = 1 + 4
    weights = torch.full((2, 3, tokens, tokens), 1 / tokens)
    distance = mean_attention_distance(weights, prefix=1, rows=2, cols=2, patch=1)
    expected = (0 + 1 + 1 + math.sqrt(2)) / 4
    torch.testing.assert_close(distance, torch.full((2, 3), expected))


def test_a_head_looking_only_at_itself_reads_zero_and_heads_stay_apart():
    tokens = 1 + 4
    self_only = torch.eye(tokens)
    uniform = torch.full((tokens, tokens), 1 / tokens)
    weights = torch.stack([self_only, uniform])[None]  # (1, 2, T, T)
    distance = mean_attention_distance(weights, prefix=1, rows=2, cols=2, patch=1)
    assert distance[0, 0].item() == 0.0
    assert distance[0, 1].item() == pytest.approx((2 + math.sqrt(2)) / 4)


def test_a_grid_that_does_not_match_the_maps_is_refused_with_both_counts():
    with pytest.raises(ValueError, match=r"5 tokens, but prefix 1 \+ 3 x 3 patches is 10"):
        mean_attention_distance(torch.full((1, 1, 5, 5), 0.2), prefix=1, rows=3, cols=3, patch=1)


def random_maps(layers: int, heads: int, tokens: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(layers, heads, tokens, tokens, generator=generator).softmax(-1)


def test_rollout_with_residual_one_is_the_identity():
    assert torch.equal(rollout(random_maps(3, 2, 5), residual=1.0), torch.eye(5))


def test_rollout_of_one_layer_is_its_renormalised_mix():
    a = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.2, 0.6], [0.0, 1.0, 0.0]])
    b = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.4, 0.6], [0.0, 0.0, 1.0]])
    weights = torch.stack([a, b])[None]  # (1, 2, 3, 3)
    # mean of heads: [[.75, .25, 0], [.1, .3, .6], [0, .5, .5]]; 0.25 I + 0.75 of it:
    expected = torch.tensor([[0.8125, 0.1875, 0.0], [0.075, 0.475, 0.45], [0.0, 0.375, 0.625]])
    torch.testing.assert_close(rollout(weights, residual=0.25), expected)
    # max of heads: [[1, .5, 0], [.2, .4, .6], [0, 1, 1]]; half I: rows [1, .25, 0],
    # [.1, .7, .3], [0, .5, 1], summing to 1.25, 1.1 and 1.5 before renormalising.
    expected_max = torch.tensor([[0.8, 0.2, 0.0], [1 / 11, 7 / 11, 3 / 11], [0.0, 1 / 3, 2 / 3]])
    torch.testing.assert_close(rollout(weights, head_fusion="max"), expected_max)


def test_rollout_multiplies_the_last_layer_on_the_left():
    first = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # everyone reads token 0
    second = torch.tensor([[0.0, 1.0], [0.0, 1.0]])  # everyone reads token 1
    weights = torch.stack([first, second])[:, None]  # (2, 1, 2, 2)
    # residual 0: R = A2 A1; token 1's output at layer 1 already holds token 0 only.
    torch.testing.assert_close(rollout(weights, residual=0.0), second @ first)
    assert torch.equal(rollout(weights, residual=0.0), torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    # and rows of any rollout sum to 1
    torch.testing.assert_close(rollout(random_maps(4, 3, 6)).sum(-1), torch.ones(6))


def test_rollout_refuses_an_unknown_fusion_naming_those_it_has():
    with pytest.raises(ValueError, match=r"one of \('mean', 'max', 'min'\), got 'sum'"):
        rollout(random_maps(1, 1, 3), head_fusion="sum")


def test_an_injected_high_norm_token_is_found_and_no_other():
    generator = torch.Generator().manual_seed(0)
    prefix, patches, width = 2, 64, 16
    hidden = torch.randn(prefix + patches, width, generator=generator)  # norms about 4
    hidden[0] *= 20  # a loud class token is never a candidate
    hidden[prefix + 37] *= 10  # the artifact
    maps = random_maps(1, 3, prefix + patches)[0]
    maps[:, :, prefix + 37] += 5.0  # it takes attention
    maps = maps / maps.sum(-1, keepdim=True)
    received = attention_received(maps)
    found = artifact_tokens(hidden, received, prefix)
    assert found.indices.tolist() == [prefix + 37]
    assert found.norms.tolist() == [hidden[prefix + 37].norm().item()]
    assert found.received.tolist() == [received[prefix + 37].item()]
    assert found.received.item() > 5 * received[prefix:].median().item()
    assert found.threshold == pytest.approx(3 * found.median)


def test_patches_of_even_norm_have_no_artifacts():
    hidden = torch.randn(1 + 16, 8, generator=torch.Generator().manual_seed(1))
    found = artifact_tokens(hidden, torch.full((17,), 1 / 17), prefix=1)
    assert found.indices.numel() == 0


def test_attention_received_is_the_mean_over_heads_and_queries():
    maps = random_maps(1, 4, 5)[0]  # (heads, T, T)
    received = attention_received(maps)
    assert received.shape == (5,)
    torch.testing.assert_close(received, maps.sum(dim=(0, 1)) / 20)
    torch.testing.assert_close(received.sum(), torch.tensor(1.0))


def test_patch_roles_read_a_hand_made_head_of_each_kind():
    """One layer of four heads on a 3 x 3 grid with a class token: a head on its own patch, a
    head on the patch to its right (or left on the last column), a head on the class token and
    a uniform head."""
    rows = cols = 3
    prefix, n = 1, 9
    tokens = prefix + n
    maps = torch.zeros(1, 4, tokens, tokens)
    maps[0, :, 0, :] = 1 / tokens  # the class token's row: not read
    for q in range(n):
        c = q % cols
        maps[0, 0, prefix + q, prefix + q] = 1.0
        maps[0, 1, prefix + q, prefix + q + (1 if c < cols - 1 else -1)] = 1.0
        maps[0, 2, prefix + q, 0] = 1.0
        maps[0, 3, prefix + q, :] = 1 / tokens
    roles = dict(zip(vision.PATCH_ROLES, vision.patch_roles(maps, prefix, rows, cols), strict=True))
    assert roles["self"][0].tolist() == pytest.approx([1, 0, 0, 1 / tokens])
    assert roles["neighbours"][0, 1] == pytest.approx(1.0)
    assert roles["prefix"][0].tolist() == pytest.approx([0, 0, 1, 1 / tokens])
    assert roles["entropy"][0].tolist() == pytest.approx([0, 0, 0, 1])
    # uniform: each patch has 3, 5 or 8 neighbours (corner, edge, centre)
    mean_neighbours = (4 * 3 + 4 * 5 + 8) / n / tokens
    assert roles["neighbours"][0, 3] == pytest.approx(mean_neighbours)
    with pytest.raises(ValueError, match="not 1 \\+ 3 x 4"):
        vision.patch_roles(maps, prefix, 3, 4)
