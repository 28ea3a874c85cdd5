"""Issue 8: small requests that used to cost large answers, nulls in answers, silent rewrites."""

import math

import pytest
import torch

from atlas_engine.models.registry import MINILM_ID
from atlas_engine.serialize import U8_ERROR_BOUND, U8_STEP, decode_binary, quantize

TEXT = "The cat sat on the mat because it was tired."


def post(client, **body):
    return client.post("/api/attention", json={"model": MINILM_ID, "text": TEXT, **body})


@pytest.mark.parametrize(
    "body,message",
    [
        ({"layers": [0] * 512, "heads": [0] * 512, "format": "f32"}, "layers: repeats index 0"),
        ({"layers": [0, 1, 0]}, "layers: repeats index 0"),
        ({"heads": [3, 3], "format": "u8"}, "heads: repeats index 3"),
        ({"layers": list(range(7))}, "layers [6] out of range"),
        ({"heads": list(range(13))}, "heads [12] out of range"),
    ],
)
def test_duplicate_or_surplus_indices_are_refused_before_any_work(client, body, message):
    response = post(client, **body)
    assert response.status_code == 422, response.text[:300]
    assert message in response.json()["detail"]


def test_schema_says_indices_are_unique(client):
    schema = client.get("/openapi.json").json()["components"]["schemas"]["AttentionRequest"]
    for name in ("layers", "heads"):
        field = next(s for s in schema["properties"][name]["anyOf"] if s.get("type") == "array")
        assert field["uniqueItems"] is True and field["items"]["minimum"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"temperature": 1e-40},
        {"scale": 1e6, "temperature": 1e-33},
        {"scale": 1e6, "temperature": 1e-6},
    ],
)
def test_detail_never_answers_null_weights(client, body):
    response = client.post(
        "/api/attention/detail",
        json={"model": MINILM_ID, "text": TEXT, "layer": 1, "head": 3, **body},
    )
    if response.status_code == 422:
        assert "temperature" in response.json()["detail"]
        return
    assert response.status_code == 200, response.text[:300]
    weights = response.json()["counterfactual_weights"]
    assert all(isinstance(w, float) and math.isfinite(w) for row in weights for w in row)
    # A near-zero temperature makes each row (close to) one-hot on its largest score.
    for row in weights:
        assert max(row) == pytest.approx(1.0, abs=1e-6) and sum(row) == pytest.approx(1.0)


def test_detail_at_the_smallest_temperature_is_one_hot(client):
    response = client.post(
        "/api/attention/detail",
        json={"model": MINILM_ID, "text": TEXT, "layer": 1, "head": 3, "temperature": 1e-6},
    )
    assert response.status_code == 200
    body = response.json()
    for scores, row in zip(body["scaled_scores"], body["counterfactual_weights"], strict=True):
        assert row.index(max(row)) == scores.index(max(scores))


@pytest.mark.parametrize("globals_", [[3, 99], [], [-1], [2, 2]])
def test_lab_masks_refuse_bad_global_tokens(client, globals_):
    response = client.post("/api/lab/masks", json={"n": 12, "global_tokens": globals_})
    assert response.status_code == 422, response.text[:300]
    assert "global_tokens" in response.json()["detail"]


def test_u8_rounding_keeps_its_bound_at_the_exact_half_way_edge():
    # In float32, w * 255 rounds up to exactly 205.5 and then to 206 (half to even), an error
    # of 1.9608e-3 > 1/510. The exact product is just below 205.5 and must round to 205.
    w = torch.tensor([0.8058823347091675], dtype=torch.float32)
    assert (w * 255).item() == 205.5
    code = quantize(w, "u8")[0]
    assert code == 205
    assert abs(code / 255 - w.double().item()) <= U8_ERROR_BOUND


def test_u8_bound_holds_for_every_float32_near_each_half_way_point():
    # Every float32 within a few ulps of each k + 0.5 boundary, for all 255 boundaries.
    centres = (torch.arange(255, dtype=torch.float64) + 0.5) / 255
    base = centres.float()
    neighbours = [base]
    up, down = base, base
    for _ in range(4):
        up = torch.nextafter(up, torch.tensor(2.0))
        down = torch.nextafter(down, torch.tensor(-1.0))
        neighbours += [up, down]
    w = torch.cat(neighbours)
    codes = torch.frombuffer(bytearray(quantize(w, "u8")), dtype=torch.uint8).double()
    assert (codes / 255 - w.double()).abs().max().item() <= U8_ERROR_BOUND


def test_u8_codes_are_the_same_across_the_pieces_they_are_computed_in():
    # quantize works U8_STEP weights at a time; every code must be what one float64 pass gives,
    # across every step boundary, for a layer-shaped tensor and for a non-contiguous view.
    generator = torch.Generator().manual_seed(0)
    maps = torch.softmax(torch.randn(3, 300, 300, generator=generator) * 4, dim=-1)
    for weights in (maps, maps.transpose(1, 2)):
        assert weights.numel() > 4 * U8_STEP
        expected = (weights.double() * 255).round().to(torch.uint8).reshape(-1)
        codes = torch.frombuffer(bytearray(quantize(weights, "u8")), dtype=torch.uint8)
        assert torch.equal(codes, expected)


def test_u8_answer_decodes_within_bound(client):
    exact = post(client, layers=[0]).json()["attentions"]
    _, weights = decode_binary(post(client, layers=[0], format="u8").content)
    assert (weights - torch.tensor(exact)).abs().max().item() <= U8_ERROR_BOUND


def test_an_answer_over_the_limit_says_how_many_layers_fit(local_checkpoints):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.conftest import make_settings

    client = TestClient(create_app(make_settings(local_checkpoints, max_answer_bytes=2**20)))
    text = " ".join(["attention"] * 250)  # 252 tokens: one head of one layer is 254 KB in f32
    response = client.post(
        "/api/attention", json={"model": MINILM_ID, "text": text, "heads": [0], "format": "f32"}
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "at most 1 MB" in detail and "at most 3 layers" in detail and "'u8'" in detail
    every_head = client.post(
        "/api/attention", json={"model": MINILM_ID, "text": text, "format": "f32"}
    )
    assert "not even one layer" in every_head.json()["detail"]
    in_u8 = client.post("/api/attention", json={"model": MINILM_ID, "text": text, "format": "u8"})
    assert "at most 1 layer of these heads" in in_u8.json()["detail"]
    fits = client.post(
        "/api/attention",
        json={"model": MINILM_ID, "text": text, "heads": [0], "layers": [0, 1, 2], "format": "f32"},
        headers={"Accept-Encoding": "identity"},  # a compressed answer has no length up front
    )
    assert fits.status_code == 200 and int(fits.headers["content-length"]) == len(fits.content)


def test_a_corrupt_embedded_file_names_a_fix_that_works_and_no_path(tmp_path):
    from atlas_engine.errors import ModelUnavailable
    from atlas_engine.models.weights import verify_sha256

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"not the published weights")
    for path in (weights, tmp_path / "missing.safetensors"):
        with pytest.raises(ModelUnavailable) as caught:
            verify_sha256(path, "0" * 64, what="MiniLM")
        assert "make reinstall-models" in caught.value.message
        assert str(tmp_path) not in caught.value.message
