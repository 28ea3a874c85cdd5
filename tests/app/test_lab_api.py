"""The lab routes: masks with their costs, and the scaled-vs-unscaled numbers."""

import math

import pytest
import torch

from attention_core import bigbird_mask, causal_mask, entropy


def test_masks_match_attention_core_and_count_pairs(client):
    body = client.post(
        "/api/lab/masks", json={"n": 10, "window": 1, "num_random": 2, "seed": 4}
    ).json()
    masks = {m["kind"]: m for m in body["masks"]}
    assert set(masks) == {
        "full", "causal", "sliding_window", "sliding_window_causal", "dilated", "global", "random",
        "bigbird", "block_sparse",
    }  # fmt: skip
    assert torch.equal(
        torch.tensor(masks["sliding_window_causal"]["mask"]),
        causal_mask(10) & ~causal_mask(10, offset=-2),
    )  # itself and one key back
    assert torch.equal(torch.tensor(masks["causal"]["mask"]), causal_mask(10))
    expected = bigbird_mask(10, window=1, global_indices=[0], num_random=2, seed=4)
    assert torch.equal(torch.tensor(masks["bigbird"]["mask"]), expected)
    for m in masks.values():
        assert m["computed_pairs"] == sum(map(sum, m["mask"])) and m["full_pairs"] == 100
    assert masks["full"]["computed_pairs"] == 100 > masks["sliding_window"]["computed_pairs"]


@pytest.mark.parametrize("body", [{"n": 0}, {"n": 257}, {"window": -1}, {"block_size": 0}])
def test_masks_refuse_bad_parameters(client, body):
    response = client.post("/api/lab/masks", json=body)
    assert response.status_code == 422
    assert response.json()["detail"]


def test_scaling_numbers_are_consistent(client):
    body = client.post("/api/lab/scaling", json={"d_k": 512, "n_keys": 16, "seed": 2}).json()
    for side in ("scaled", "unscaled"):
        weights = torch.tensor(body[side]["weights"], dtype=torch.float64)
        assert weights.sum().item() == pytest.approx(1.0)
        assert body[side]["entropy"] == pytest.approx(entropy(weights).item())
        assert body[side]["effective_tokens"] == pytest.approx(math.exp(body[side]["entropy"]))
        assert body[side]["max_weight"] == pytest.approx(weights.max().item())
    # The unscaled logits are sqrt(d_k) times the scaled ones.
    ratio = torch.tensor(body["unscaled"]["logits"]) / torch.tensor(body["scaled"]["logits"])
    assert torch.allclose(ratio, torch.full_like(ratio, math.sqrt(512)))
    assert body["unscaled"]["entropy"] < body["scaled"]["entropy"]
    assert body["variance_unscaled"] == pytest.approx(512, rel=0.1)
    assert body["variance_scaled"] == pytest.approx(1, rel=0.1)
    curve = body["curve_entropy_unscaled"]
    assert curve[0] > curve[-1]  # unscaled entropy collapses as d_k grows
    scaled_curve = body["curve_entropy_scaled"]
    assert max(scaled_curve) - min(scaled_curve) < 0.5  # scaled stays roughly level
    assert body["max_entropy"] == pytest.approx(math.log(16))


def test_temperature_flattens_and_bounds_are_enforced(client):
    cold = client.post("/api/lab/scaling", json={"d_k": 64, "temperature": 0.5}).json()
    hot = client.post("/api/lab/scaling", json={"d_k": 64, "temperature": 20}).json()
    assert hot["scaled"]["entropy"] > cold["scaled"]["entropy"]
    for bad in ({"d_k": 0}, {"d_k": 5000}, {"temperature": 0}, {"n_keys": 1}):
        assert client.post("/api/lab/scaling", json=bad).status_code == 422
