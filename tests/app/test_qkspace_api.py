"""POST /api/attention/qkspace: the plane is the PCA of the head's own (replayed, post-RoPE)
queries and keys after a weight-preserving normalisation; the strongest keys are the model's."""

import pytest
import torch

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from attention_core import normalise_qk
from attention_core.qkspace import pca_2d, umap_available
from tests.support.float32_json import assert_float32_numbers

TEXT = "The cat sat on the mat because the mat was warm."
pytestmark = pytest.mark.slow


def post(client, **body) -> dict:
    response = client.post("/api/attention/qkspace", json={"text": TEXT, **body})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(("model_id", "layer", "head"), [(MINILM_ID, 2, 3), (SMOLLM2_ID, 4, 7)])
def test_one_head_is_the_pca_of_its_replayed_queries_and_keys(client, model_id, layer, head):
    answer = post(client, model=model_id, layer=layer, head=head, strongest=4)
    detail = client.post(
        "/api/attention/detail",
        json={
            "model": model_id,
            "text": TEXT,
            "layer": layer,
            "head": head,
            "fields": ["q", "k", "weights"],
        },
    ).json()
    q, k = torch.tensor(detail["q"]), torch.tensor(detail["k"])
    moved = normalise_qk(q, k)
    coords, explained = pca_2d(torch.cat([moved.queries, moved.keys]))
    (space,) = answer["heads"]
    assert space["head"] == head and space["kv_head"] == detail["kv_head"]
    n = len(answer["tokens"])
    torch.testing.assert_close(torch.tensor(space["queries"]), coords[:n], atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor(space["keys"]), coords[n:], atol=1e-4, rtol=0)
    assert space["explained"] == pytest.approx(list(explained), abs=1e-6)
    # Every weight survives the move: the normalised vectors give transformers' own weights.
    scores = moved.queries @ moved.keys.T * detail["model_scale"]
    if answer["causal"]:
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    weights = torch.tensor(detail["weights"])
    torch.testing.assert_close(scores.softmax(-1), weights, atol=1e-5, rtol=0)
    top = weights.topk(4, dim=-1)
    visible = [min(4, i + 1) if answer["causal"] else 4 for i in range(n)]  # keys a row reads
    kept = zip(top.indices.tolist(), visible, strict=True)
    assert space["strongest"] == [row[:m] for row, m in kept]
    for got, want, m in zip(space["strongest_weights"], top.values, visible, strict=True):
        torch.testing.assert_close(torch.tensor(got), want[:m])
    for field in ("queries", "keys"):  # float32's digits, not float64's
        assert_float32_numbers(space[field])
    for row in space["strongest_weights"]:
        assert_float32_numbers(row)


def test_a_whole_layer_gives_every_head_and_each_equals_its_own_request(client):
    layer = post(client, model=SMOLLM2_ID, layer=2)
    assert [h["head"] for h in layer["heads"]] == list(range(9))
    assert [h["kv_head"] for h in layer["heads"]] == [h // 3 for h in range(9)]
    one = post(client, model=SMOLLM2_ID, layer=2, head=5)
    assert one["heads"][0] == layer["heads"][5]


def test_refusals_say_why(client):
    if not umap_available():
        response = client.post(
            "/api/attention/qkspace",
            json={"model": MINILM_ID, "text": TEXT, "layer": 0, "method": "umap"},
        )
        assert response.status_code == 422 and "umap-learn" in response.text
    response = client.post(
        "/api/attention/qkspace", json={"model": "local/gptneo-tiny", "text": TEXT, "layer": 0}
    )
    assert response.status_code == 422 and "cannot replay a head" in response.text
    response = client.post(
        "/api/attention/qkspace", json={"model": MINILM_ID, "text": TEXT, "layer": 0, "head": 12}
    )
    assert response.status_code == 422 and "head [12] out of range" in response.text
    models = client.get("/api/models").json()
    assert models["projections"] == (["pca", "umap"] if umap_available() else ["pca"])


def test_a_causal_query_lists_only_the_keys_it_may_read(client):
    """Row i of a causal head reads keys 0..i: its strongest keys never include a later key
    (they were listed, with weight 0, and drawn as lines)."""
    (space,) = post(client, model=SMOLLM2_ID, layer=3, head=0, strongest=4)["heads"]
    for query, (keys, weights) in enumerate(
        zip(space["strongest"], space["strongest_weights"], strict=True)
    ):
        assert len(keys) == min(4, query + 1) == len(weights)
        assert all(key <= query for key in keys) and all(w > 0 for w in weights)
    (both_ways,) = post(client, model=MINILM_ID, layer=0, head=0, strongest=4)["heads"]
    assert all(len(keys) == 4 for keys in both_ways["strongest"])  # an encoder reads every key
