"""Maps pooled on the server (POST /api/attention with `cell`): each cell x cell block of a
model's own weights as its max or mean, in every format, sized by the values it answers."""

import io
import json
import math

import numpy as np
import pytest
import torch
from safetensors.numpy import load

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.serialize import U8_ERROR_BOUND, decode_binary
from bench.compression import prose
from tests.app.test_attention_fidelity import direct_attentions
from tests.support.pooling import block_pool

pytestmark = pytest.mark.slow


def ask(client, **body):
    response = client.post("/api/attention", json=body)
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("model_id", [MINILM_ID, SMOLLM2_ID])
@pytest.mark.parametrize("reduce", ["max", "mean"])
def test_pooled_maps_are_the_blocks_of_the_models_own_weights(client, app, model_id, reduce):
    loaded = app.state.manager.get(model_id)
    text = prose(loaded.tokenizer, 101)
    expected = direct_attentions(app, model_id, text)  # (L, H, T, T)
    seq = expected.shape[-1]
    cell = 7
    side = math.ceil(seq / cell)
    want_max, want_mean = block_pool(expected, cell)
    want = want_max if reduce == "max" else want_mean
    body = {"model": model_id, "text": text, "cell": cell, "reduce": reduce}
    answer = ask(client, **body, layers=[0, 2]).json()
    assert (answer["cell"], answer["reduce"], len(answer["tokens"])) == (cell, reduce, seq)
    got = torch.tensor(answer["attentions"])
    assert got.shape == (2, loaded.arch.num_heads, side, side)
    torch.testing.assert_close(got, want[[0, 2]], rtol=0, atol=1e-7)  # summed in another order
    meta, f32 = decode_binary(ask(client, **body, format="f32").content)
    assert meta["shape"] == [loaded.arch.num_layers, loaded.arch.num_heads, side, side]
    assert (meta["cell"], meta["reduce"]) == (cell, reduce)
    torch.testing.assert_close(f32, want, rtol=0, atol=1e-7)
    _, u8 = decode_binary(ask(client, **body, format="u8").content)
    assert (u8 - want).abs().max() <= U8_ERROR_BOUND + 1e-7


def test_standard_formats_carry_pooled_maps_and_say_so(client):
    body = {"model": MINILM_ID, "text": "Standard formats, pooled in threes.", "cell": 3}
    exact = ask(client, **body).json()
    side = math.ceil(len(exact["tokens"]) / 3)
    stored = ask(client, **body, format="safetensors").content
    maps = load(stored)["attentions"]
    assert maps.shape == (6, 12, side, side)
    assert np.array_equal(maps, np.array(exact["attentions"], dtype=np.float32))
    header = json.loads(stored[8 : 8 + int.from_bytes(stored[:8], "little")])
    assert json.loads(header["__metadata__"]["atlas"])["cell"] == 3
    npy = np.load(io.BytesIO(ask(client, **body, format="npy").content))
    assert np.array_equal(npy, maps)


def test_cell_one_is_the_weights_themselves(client):
    plain, maps = decode_binary(
        ask(client, model=MINILM_ID, text="Pooling of one.", format="f32").content
    )
    one, same = decode_binary(
        ask(client, model=MINILM_ID, text="Pooling of one.", format="f32", cell=1).content
    )
    assert torch.equal(maps, same) and maps.shape[-1] == len(plain["tokens"])
    assert (plain["cell"], plain["reduce"]) == (one["cell"], one["reduce"]) == (1, "max")


def test_a_pooled_answer_is_sized_by_the_values_it_holds(client, app):
    """Every layer of a 510-token SmolLM2 text is 70 million weights: over the JSON limit and,
    as f32, over the answer's bytes; at cell 10 it is 30 x 9 x 51 x 51 values, and fits."""
    loaded = app.state.manager.get(SMOLLM2_ID)
    text = prose(loaded.tokenizer, 510)
    whole = client.post("/api/attention", json={"model": SMOLLM2_ID, "text": text})
    assert whole.status_code == 422
    assert "a larger cell" in whole.json()["detail"]
    rollout = client.post(  # a route that cannot pool says nothing of cells
        "/api/attention/aggregate", json={"model": SMOLLM2_ID, "text": text, "kind": "average"}
    )
    assert rollout.status_code == 422 and "cell" not in rollout.json()["detail"]
    response = client.post(
        "/api/attention",
        json={"model": SMOLLM2_ID, "text": text, "cell": 10, "format": "u8"},
        headers={"accept-encoding": "identity"},
    )
    assert response.status_code == 200, response.text
    meta, maps = decode_binary(response.content)
    side = math.ceil(len(meta["tokens"]) / 10)
    assert maps.shape == (30, 9, side, side)
    assert len(response.content) < 30 * 9 * side * side + 50_000  # not 70 MB
    causal = torch.ones(side, side).triu(1).bool()
    assert (maps[..., causal] == 0).all()  # blocks wholly in the future stay 0


@pytest.mark.parametrize(
    "pooling",
    [
        {"cell": 0}, {"cell": -1}, {"cell": 4097}, {"cell": 1.5}, {"cell": "2"}, {"cell": True},
        {"cell": 2, "reduce": "median"}, {"cell": 2, "reduce": None},
    ],
)  # fmt: skip
def test_a_cell_or_reduce_outside_the_schema_is_refused(client, pooling):
    response = client.post("/api/attention", json={"model": MINILM_ID, "text": "Cells.", **pooling})
    assert response.status_code == 422, response.text
    field = "reduce" if "reduce" in pooling else "cell"
    assert field in response.text  # the error names the field at fault
