"""value_weighted in /api/attention/detail: ‖α_ij v_j‖ from the model's own weights and the
replayed values, for every family (GQA: the query head's shared value head)."""

import pytest
import torch

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID

TEXT = "The animal didn't cross the street because it was tired."
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("model_id", "head"), [(MINILM_ID, 5), (SMOLLM2_ID, 7), ("local/gpt2-tiny", 1)]
)
def test_value_weighted_is_each_weight_times_its_keys_value_length(client, model_id, head):
    response = client.post(
        "/api/attention/detail",
        json={"model": model_id, "text": TEXT, "layer": 1, "head": head,
              "fields": ["weights", "v", "value_weighted"]},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    body = response.json()
    weights = torch.tensor(body["weights"], dtype=torch.float64)  # (T, T), the model's own
    v = torch.tensor(body["v"], dtype=torch.float64)  # (T, head_dim) of this head's kv head
    got = torch.tensor(body["value_weighted"], dtype=torch.float64)
    assert torch.allclose(got, weights * v.norm(dim=-1), rtol=1e-6, atol=1e-9)
    assert body["q"] is None  # only the asked fields are computed and sent
