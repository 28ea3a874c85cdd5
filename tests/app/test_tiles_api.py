"""POST /api/attention/tiles: windows and zoomed-out blocks of a layer's maps, computed block by
block from the replayed q and k, equal the same cut of transformers' own maps (within the bound)."""

import math

import numpy as np
import pytest
import torch

from atlas_engine import compute
from atlas_engine.errors import RequestCancelled
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.tiles import TilesRequest, TilesResponse
from atlas_engine.services.tiles import tiles
from bench.compression import prose
from tests.support.float32_json import assert_answer_is, assert_float32_numbers
from tests.support.pooling import block_pool

TEXT = "The quick brown fox jumps over the lazy dog because it wants to play outside today."
pytestmark = pytest.mark.slow


def post(client, **body):
    return client.post("/api/attention/tiles", json={"text": TEXT, **body})


def maps(client, model_id: str, layer: int, text: str = TEXT) -> torch.Tensor:
    body = {"model": model_id, "text": text, "layers": [layer], "format": "json"}
    return torch.tensor(client.post("/api/attention", json=body).json()["attentions"][0])


def pooled(weights: torch.Tensor, cell: int, how: str) -> torch.Tensor:
    maximum, mean = block_pool(weights, cell)
    return maximum if how == "max" else mean


@pytest.mark.parametrize("model_id", [MINILM_ID, SMOLLM2_ID, "local/gpt2-inverse-layer"])
def test_windows_and_zoomed_out_blocks_equal_transformers_maps(client, model_id):
    full = maps(client, model_id, 1)  # (H, T, T)
    answer = post(client, model=model_id, layer=1).json()
    assert answer["error_bound"] == 1e-5 and answer["seq_len"] == full.shape[-1]
    torch.testing.assert_close(torch.tensor(answer["values"]), full, atol=1e-5, rtol=0)
    response = post(client, model=model_id, layer=1, heads=[1, 0], rows=[3, 9], cols=[1, 7])
    window = assert_answer_is(TilesResponse, response)
    torch.testing.assert_close(
        torch.tensor(window["values"]), full[[1, 0], 3:9, 1:7], atol=1e-5, rtol=0
    )
    for how in ("max", "mean"):
        zoomed = post(client, model=model_id, layer=1, cell=4, reduce=how).json()
        torch.testing.assert_close(
            torch.tensor(zoomed["values"]), pooled(full, 4, how), atol=1e-5, rtol=0
        )
        assert len(zoomed["row_tokens"]) == math.ceil(full.shape[-1] / 4)


def test_a_512_token_layer_zoomed_out(client, app, monkeypatch):
    loaded = app.state.manager.get(SMOLLM2_ID)
    text = prose(loaded.tokenizer, 500)
    full = maps(client, SMOLLM2_ID, 7, text)[[2, 8]]  # the pass cached: no layer's points below
    between = []  # each tile is a point where a short job may run (atlas_engine.compute.run_beside)
    monkeypatch.setattr(compute, "run_beside", lambda: between.append(True))
    body = {"model": SMOLLM2_ID, "text": text, "layer": 7, "heads": [2, 8], "cell": 16}
    answer = client.post("/api/attention/tiles", json=body).json()
    torch.testing.assert_close(
        torch.tensor(answer["values"]), pooled(full, 16, "max"), atol=1e-5, rtol=0
    )
    # the normalisers' tiles of 256 rows (causal: 1 + 2 over 501 tokens), then one of 512
    assert len(between) == 4

    checks = []

    def gone_after_two() -> bool:
        checks.append(True)
        return len(checks) > 2

    request = TilesRequest.model_validate(body)
    with pytest.raises(RequestCancelled, match="the window's tiles"):
        tiles(app.state.passes, request, gone_after_two)
    assert len(checks) == 3  # it stopped at the first check after its client left
    assert app.state.answer_budget.held_bytes == 0  # its reservation released


def test_refusals_come_before_any_work_and_say_why(client, app):
    loaded = app.state.manager.get(MINILM_ID)
    long = prose(loaded.tokenizer, 500)
    response = client.post(
        "/api/attention/tiles", json={"model": MINILM_ID, "text": long, "layer": 0}
    )
    assert response.status_code == 422 and "at most 1,048,576" in response.text
    response = post(client, model=MINILM_ID, layer=0, rows=[0, 999])
    assert response.status_code == 422 and "past the text" in response.text
    response = post(client, model=MINILM_ID, layer=0, cols=[5, 3])
    assert response.status_code == 422 and "start < stop" in response.text
    response = post(client, model="local/gptneo-tiny", layer=0)
    assert response.status_code == 422 and "cannot replay a head" in response.text


def test_weights_are_written_as_float32_numbers(client):
    """Each value is the shortest decimal of its float32: no float64 digits (0.10000000149011612
    for 0.1), so the answer is about half the size."""
    answer = assert_answer_is(TilesResponse, post(client, model=MINILM_ID, layer=2))
    values = np.array(answer["values"])
    assert values.shape == (12, answer["seq_len"], answer["seq_len"])
    assert_float32_numbers(values)
