"""POST /api/attention/aggregate and /similarity against the maps of POST /api/attention."""

import torch

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.serialize import decode_binary
from attention_core.aggregate import attention_rollout

TEXT = "The animal didn't cross the street because it was too tired."


def maps(client, model, **extra):
    response = client.post(
        "/api/attention", json={"model": model, "text": TEXT, "format": "f32", **extra}
    )
    assert response.status_code == 200, response.text[:300]
    return decode_binary(response.content)


def aggregate(client, model, **extra):
    response = client.post(
        "/api/attention/aggregate", json={"model": model, "text": TEXT, "format": "f32", **extra}
    )
    assert response.status_code == 200, response.text[:300]
    return decode_binary(response.content)


def test_average_is_the_mean_of_the_layers_heads(client):
    _, every = maps(client, SMOLLM2_ID)
    meta, average = aggregate(client, SMOLLM2_ID, kind="average", layers=[3, 17])
    assert meta["shape"] == [2, 1, every.shape[-1], every.shape[-1]]
    assert (meta["kind"], meta["heads"], meta["residual"]) == ("average", [], None)
    torch.testing.assert_close(average[:, 0], every[[3, 17]].mean(dim=1), rtol=0, atol=1e-7)


def test_rollout_in_any_layer_order_matches_the_core(client):
    _, every = maps(client, MINILM_ID)
    expected = attention_rollout(every, residual=0.3)
    meta, rolled = aggregate(client, MINILM_ID, kind="rollout", residual=0.3, layers=[5, 0, 3])
    assert meta["residual"] == 0.3
    torch.testing.assert_close(rolled[:, 0], expected[[5, 0, 3]], rtol=0, atol=1e-6)
    torch.testing.assert_close(rolled.sum(dim=-1), torch.ones(3, 1, rolled.shape[-1]))


def test_rollout_of_a_decoder_stays_causal_and_json_matches_binary(client):
    _, rolled = aggregate(client, SMOLLM2_ID, kind="rollout", layers=[29])
    assert torch.equal(rolled[0, 0].triu(1), torch.zeros_like(rolled[0, 0]))
    as_json = client.post(
        "/api/attention/aggregate",
        json={"model": SMOLLM2_ID, "text": TEXT, "kind": "rollout", "layers": [29]},
    ).json()
    assert torch.equal(torch.tensor(as_json["attentions"]), rolled)


def test_aggregate_is_sized_before_work(client):
    long = " ".join(["word"] * 500)
    response = client.post(
        "/api/attention/aggregate",
        json={"model": SMOLLM2_ID, "text": long, "kind": "average", "format": "json"},
    )
    assert response.status_code == 422 and "JSON limit" in response.json()["detail"]
    bad = client.post(
        "/api/attention/aggregate",
        json={"model": MINILM_ID, "text": TEXT, "kind": "average", "layers": [6]},
    )
    assert bad.status_code == 422 and "out of range" in bad.json()["detail"]


def test_similarity_is_symmetric_with_ones_on_the_diagonal_and_a_full_order(client):
    response = client.post("/api/attention/similarity", json={"model": MINILM_ID, "text": TEXT})
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    matrix = torch.tensor(body["similarity"])
    assert matrix.shape == (72, 72) and body["exact"]
    assert torch.equal(matrix, matrix.T) and torch.all(matrix.diagonal() == 1)
    assert torch.all((matrix >= 0) & (matrix <= 1))
    assert sorted(body["order"]) == list(range(72))


def test_bad_aggregate_and_similarity_requests_get_clear_4xx(client):
    cases = [
        ("/api/attention/aggregate", {"kind": "max"}, 422, "invalid_field"),
        ("/api/attention/aggregate", {"kind": "rollout", "residual": 1.5}, 422, "invalid_field"),
        ("/api/attention/aggregate", {"kind": "average", "layers": [1, 1]}, 422, "invalid_field"),
        ("/api/attention/aggregate", {"kind": "average", "extra": 1}, 422, "invalid_field"),
        ("/api/attention/similarity", {"text": "   "}, 422, "invalid_field"),
        ("/api/attention/similarity", {"model": "no/such-model"}, 404, "unknown_model"),
    ]
    for path, change, status, code in cases:
        body = {"model": MINILM_ID, "text": TEXT, **change}
        response = client.post(path, json=body)
        assert (response.status_code, response.json()["code"]) == (status, code), (path, change)
        assert response.json()["detail"]
