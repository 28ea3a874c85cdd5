"""POST /api/core/attention: the from-scratch stack over HTTP, and its refusals."""

import math

import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.schemas.core import SEED_EXAMPLE
from attention_core import scaled_dot_product_attention


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app())


def test_health(client):
    response = client.get("/api/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_health_answers_head_as_load_balancers_send_it(client):
    response = client.head("/api/health")  # was 405
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-type"] == "application/json"


def test_seed_example_over_http_matches_the_core(client):
    response = client.post("/api/core/attention", json=SEED_EXAMPLE)
    assert response.status_code == 200
    body = response.json()
    q, k, v = (torch.tensor(SEED_EXAMPLE[n], dtype=torch.float64) for n in "qkv")
    trace = scaled_dot_product_attention(q, k, v)
    assert torch.allclose(torch.tensor(body["weights"], dtype=torch.float64), trace.weights)
    assert torch.allclose(torch.tensor(body["output"], dtype=torch.float64), trace.output)
    assert body["scale"] == pytest.approx(1 / math.sqrt(2))
    assert body["weights"][0][0] == pytest.approx(0.378, abs=1e-3)


def test_causal_mask_gives_null_minus_inf_and_zero_weights(client):
    body = client.post("/api/core/attention", json={**SEED_EXAMPLE, "mask": "causal"}).json()
    assert body["masked_scores"][0][1] is None and body["masked_scores"][0][2] is None
    assert body["weights"][0] == [1.0, 0.0, 0.0]
    assert body["mask"][0] == [True, False, False]
    assert (body["computed_pairs"], body["full_pairs"]) == (6, 9)


def test_unscaled_and_numeric_scale_and_temperature(client):
    unscaled = client.post("/api/core/attention", json={**SEED_EXAMPLE, "scale": False}).json()
    assert unscaled["scaled_scores"] == unscaled["scores"]
    assert unscaled["scale"] == 1.0
    hot = client.post("/api/core/attention", json={**SEED_EXAMPLE, "scale": 0.5, "temperature": 2})
    assert hot.status_code == 200
    assert hot.json()["scaled_scores"][0][0] == pytest.approx(1.25 * 0.5 / 2)


@pytest.mark.parametrize(
    "extra",
    [
        {"mask": "sliding_window", "window": 1},
        {"mask": "dilated", "window": 1, "dilation": 2},
        {"mask": "global", "global_tokens": [0]},
        {"mask": "random", "num_random": 1, "seed": 3},
        {"mask": "bigbird", "window": 0, "global_tokens": [0], "num_random": 1},
        {"mask": "block_sparse", "block_size": 2},
        {"mask": "custom", "custom_mask": [[True, False, False], [True, True, False], [True] * 3]},
    ],
)
def test_every_mask_kind_runs_and_zeros_masked_cells(client, extra):
    body = client.post("/api/core/attention", json={**SEED_EXAMPLE, **extra}).json()
    for w_row, m_row in zip(body["weights"], body["mask"], strict=True):
        assert all(w == 0 for w, m in zip(w_row, m_row, strict=True) if not m)
        if any(m_row):
            assert sum(w_row) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"q": [[1.0, 0.5], [0.3]]}, "q is ragged: row 0 has 2 numbers but row 1 has 1"),
        ({"q": []}, "q: List should have at least 1 item"),
        ({"q": [[]]}, "q.0: List should have at least 1 item"),
        ({"k": [[1.0, 0.5, 0.1]] * 3}, "q has 2 columns but k has 3"),
        ({"v": [[0.1, 0.2]] * 2}, "k has 3 rows but v has 2"),
        ({"q": [[0.0] * 2] * 65}, "at most 64"),
        ({"q": [[0.0] * 257] * 3, "k": [[0.0] * 257] * 3}, "at most 256"),
        ({"mask": "sliding_window"}, "needs a 'window'"),
        ({"mask": "custom"}, "needs 'custom_mask'"),
        ({"mask": "custom", "custom_mask": [[True]]}, "custom_mask must be (3, 3)"),
        ({"mask": "global", "global_tokens": [7]}, "global token indices must lie in [0, 3)"),
        ({"mask": "nonsense"}, "mask"),
        ({"scale": -1}, "scale.constrained-float: Input should be greater than 0"),
        ({"temperature": 0}, "temperature"),
        ({"q": [["a", "b"]] * 3}, "q"),
    ],
)
def test_bad_input_is_422_with_a_readable_message(client, change, message):
    response = client.post("/api/core/attention", json={**SEED_EXAMPLE, **change})
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused(client, literal):
    raw = '{"q": [[LIT, 0.5]], "k": [[1.0, 0.5]], "v": [[0.1, 0.2]]}'.replace("LIT", literal)
    response = client.post(
        "/api/core/attention", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert "finite" in response.json()["detail"]


def test_overflowing_scores_are_refused_not_nan(client):
    huge = [[1e200, 1e200]]
    body = {"q": huge, "k": huge, "v": [[1.0, 1.0]]}
    response = client.post("/api/core/attention", json=body)
    assert response.status_code == 422
    assert "overflow" in response.json()["detail"]


def test_openapi_documents_the_limits(client):
    schema = client.get("/openapi.json").json()
    request = schema["components"]["schemas"]["CoreAttentionRequest"]
    assert request["properties"]["q"]["maxItems"] == 64
    assert "/api/core/attention" in schema["paths"]


def test_every_operation_has_a_summary_of_its_own(client):
    """Not FastAPI's title-cased function name ("Load Status"), which says little in /docs."""
    paths = client.get("/openapi.json").json()["paths"]
    for path, item in paths.items():
        for method, operation in item.items():
            # FastAPI's own: the function's name, which also starts the operation's id
            words = operation["summary"].lower().replace(" ", "_")
            assert not operation["operationId"].startswith(f"{words}_"), (method, path)


def test_pages_serve_plotly_locally_with_csp(client):
    page = client.get("/lab/step-by-step")
    assert page.status_code == 200
    assert "/static/vendor/plotly-" in page.text
    assert "cdn" not in page.text.lower()
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    src = page.text.split("/static/vendor/")[1].split('"')[0]
    bundle = client.get(f"/static/vendor/{src}")
    assert bundle.status_code == 200 and len(bundle.content) > 1_000_000
    assert client.get("/static/vendor/../../etc/passwd").status_code == 404
    assert client.get("/static/vendor/evil.js").status_code == 404
