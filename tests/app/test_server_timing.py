"""Every /api/ answer says where its time went (Server-Timing), and OpenAPI says it does."""

import itertools

import pytest
from fastapi.testclient import TestClient

from app import timing
from app.main import create_app
from atlas_engine import timing as stages
from atlas_engine.models.registry import MINILM_ID
from attention_atlas.client import server_timing
from tests.conftest import make_settings

_texts = itertools.count()


def new_text() -> str:
    return f"Timing text number {next(_texts)}: the cat sat on the mat."


def stages_of(response) -> dict[str, float]:
    return server_timing(response.headers[timing.HEADER])


def test_a_new_texts_answer_times_its_pass_and_the_same_again_has_none(client):
    body = {"model": MINILM_ID, "text": new_text(), "format": "json"}
    client.post("/api/attention", json={**body, "text": "load the model first"})

    new = client.post("/api/attention", json=body)
    assert new.status_code == 200
    stages = stages_of(new)
    assert set(stages) == {"app", "queue", "compute", "tokenize", "forward"}
    assert stages["forward"] == pytest.approx(new.json()["forward_ms"], abs=0.002)
    assert stages["compute"] >= stages["forward"] + stages["tokenize"] - 0.002
    assert stages["app"] >= stages["queue"] + stages["compute"] - 0.002
    assert list(stages) == [name for name in timing.STAGES if name in stages]  # STAGES' order

    again = client.post("/api/attention", json=body)
    assert again.json()["cached"] is True
    assert set(stages_of(again)) == {"app", "queue", "compute"}  # nothing of the last request


def test_a_models_first_request_times_its_loading(local_checkpoints):
    with TestClient(create_app(make_settings(local_checkpoints))) as fresh:
        answer = fresh.post("/api/attention", json={"model": "local/gpt2-tiny", "text": "Hi there"})
    stages = stages_of(answer)
    assert stages["load"] > 0
    assert stages["compute"] >= stages["load"] + stages["forward"] - 0.002


@pytest.mark.parametrize(
    "request_kwargs,status",
    [
        ({"json": {"model": MINILM_ID, "text": "x", "layers": [99]}}, 422),
        ({"json": {"model": "no/such-model", "text": "x"}}, 404),
        ({"content": b"{", "headers": {"content-type": "application/json"}}, 400),
        ({"content": b"x" * 64, "headers": {"content-length": str(10**9)}}, 413),
    ],
)
def test_refusals_are_timed_too(client, request_kwargs, status):
    answer = client.post("/api/attention", **request_kwargs)
    assert answer.status_code == status
    assert "app" in stages_of(answer) and "forward" not in stages_of(answer)


def test_only_the_api_is_timed(client):
    assert "app" in stages_of(client.get("/api/health"))
    assert timing.HEADER not in client.get("/").headers


def test_openapi_describes_the_header_once_and_names_it_on_each_success(client):
    document = client.get("/openapi.json").json()
    description = document["info"]["description"]
    assert all(f"`{name}`" in description for name in timing.STAGES)
    assert "errors included" in description
    header = document["components"]["headers"][timing.HEADER]
    assert header["schema"] == {"type": "string"}
    reference = {"$ref": f"#/components/headers/{timing.HEADER}"}
    operations = [
        (path, operation) for path, item in document["paths"].items() for operation in item.values()
    ]
    assert len(operations) > 30 and all(path.startswith("/api/") for path, _ in operations)
    for path, operation in operations:
        named = {
            status: response["headers"][timing.HEADER]
            for status, response in operation["responses"].items()
            if timing.HEADER in response.get("headers", {})
        }
        # Once an operation, by reference: on every status it made /docs pages long.
        assert len(named) == 1 and list(named.values()) == [reference], (path, named)
        assert next(iter(named)).startswith("2"), (path, named)
    served = client.get("/openapi.json").text
    assert all(served.count(what) == 1 for what in timing.STAGES.values())  # written once


def test_the_header_reads_back_and_timing_outside_a_request_adds_nothing():
    value = timing.header_value({"forward": 0.0071846, "app": 0.0093912})
    assert value == "app;dur=9.391, forward;dur=7.185"
    assert server_timing(value) == {"app": 9.391, "forward": 7.185}
    assert server_timing('cache;desc="hit", db;dur=2.5') == {"cache": 0.0, "db": 2.5}
    stages.add("forward", 1.0)  # no request: no error, nowhere to go
    with stages.timed("tokenize"):
        pass
    with stages.collecting({}) as collected:  # what the middleware does for each request
        stages.add("forward", 0.5)
    assert collected == {"forward": 0.5}
