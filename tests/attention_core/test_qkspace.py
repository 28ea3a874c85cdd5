"""Query-key space: the normalisation leaves attention unchanged, the projection is exact PCA."""

import pytest
import torch

from attention_core import masked_softmax, normalise_qk, qk_space
from attention_core.qkspace import pca_2d


def _softmax_rows(q, k):
    return masked_softmax(q @ k.T, None)


@pytest.mark.parametrize("seed", range(5))
def test_normalisation_leaves_every_weight_unchanged(seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(7, 16, generator=g, dtype=torch.float64) * 3 + 2
    k = torch.randn(9, 16, generator=g, dtype=torch.float64) * 0.5 - 4
    moved = normalise_qk(q, k)
    torch.testing.assert_close(
        _softmax_rows(moved.queries, moved.keys), _softmax_rows(q, k), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(moved.keys.mean(0), moved.queries.mean(0), rtol=0, atol=1e-12)
    assert moved.queries.norm(dim=-1).mean().item() == pytest.approx(
        moved.keys.norm(dim=-1).mean().item(), rel=1e-12
    )


def test_pca_of_points_in_a_plane_keeps_every_distance():
    g = torch.Generator().manual_seed(0)
    flat = torch.randn(20, 2, generator=g, dtype=torch.float64)
    rotation, _ = torch.linalg.qr(torch.randn(10, 10, generator=g, dtype=torch.float64))
    points = torch.cat([flat, torch.zeros(20, 8, dtype=torch.float64)], 1) @ rotation + 5
    coords, explained = pca_2d(points)
    torch.testing.assert_close(torch.cdist(coords, coords), torch.cdist(flat, flat))
    assert sum(explained) == pytest.approx(1.0)
    assert explained[0] >= explained[1]


def test_a_query_lands_on_the_key_it_attends_to():
    """Keys far apart on a circle, each query a scaled copy of one key: every query attends
    almost only to its own key, and in query-key space its nearest key is that key."""
    angles = torch.arange(6, dtype=torch.float64) * (2 * torch.pi / 6)
    k = torch.stack([angles.cos(), angles.sin()], 1) * 4  # (6, 2)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    q = k[order] * 2.5  # query i looks for key order[i]
    weights = _softmax_rows(q, k)
    assert (weights.argmax(1) == order).all() and (weights.max(1).values > 0.99).all()
    space = qk_space(q, k)
    nearest = torch.cdist(space.queries, space.keys).argmin(1)
    assert (nearest == order).all()


def test_degenerate_inputs_do_not_fail():
    one = qk_space(torch.ones(1, 4), torch.ones(1, 4))
    assert one.queries.shape == (1, 2) and one.keys.shape == (1, 2)
    zeros = normalise_qk(torch.zeros(3, 4), torch.zeros(3, 4))
    assert zeros.query_scale == 1.0
    with pytest.raises(ValueError, match="pca' or 'umap"):
        qk_space(torch.ones(3, 4), torch.ones(3, 4), method="tsne")
