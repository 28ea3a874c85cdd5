"""AtlasClient covers every route of the REST API, each against a live server: MiniLM where
an encoder does, SmolLM2 where a route needs a decoder; short texts, few tokens."""

import json
import re
import socket

import numpy as np
import pytest

from app.main import create_app
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from attention_atlas.client import LAB_ROUTES, AtlasClient, AtlasError

pytestmark = pytest.mark.slow
TEXT = "The cat sat on the mat because it was tired."
ROUTE = re.compile(r"\b(GET|POST) (/api/[\w/{}-]*[\w}])")


@pytest.fixture(scope="module")
def atlas(atlas_server):
    return AtlasClient(atlas_server.base)


@pytest.fixture(scope="module")
def minilm_tokens(atlas):
    return atlas.attention(MINILM_ID, TEXT, layers=[0], heads=[0]).tokens


def test_every_route_of_the_api_has_a_method_that_names_it():
    document = create_app().openapi()
    routes = {f"{method.upper()} {path}" for path, item in document["paths"].items()
              for method in item}  # fmt: skip
    lab = {route for route in routes if route.startswith("POST /api/lab/")} - {
        "POST /api/lab/train"  # a stream, AtlasClient.train
    }
    assert lab == {f"POST /api/lab/{name}" for name in LAB_ROUTES}
    named = {
        " ".join(match)
        for name in dir(AtlasClient)
        if not name.startswith("_") and name != "lab"  # lab: every name in LAB_ROUTES
        for match in ROUTE.findall(getattr(AtlasClient, name).__doc__ or "")
    }
    assert routes - lab == named, (routes - lab) ^ named


def test_the_server_and_model_routes(atlas):
    assert atlas.health() == {"status": "ok"}
    server = atlas.server()
    assert server["default_encoder"] == MINILM_ID and server["default_decoder"] == SMOLLM2_ID
    assert MINILM_ID in {m["id"] for m in atlas.models()}
    assert atlas.load(MINILM_ID)["id"] == MINILM_ID
    assert atlas.load_status(MINILM_ID)["state"] in ("loading", "ready")
    text = atlas.induction_text(MINILM_ID, length=8, seed=1)
    half = text.split()
    assert text == atlas.induction_text(MINILM_ID, length=8, seed=1) and len(half) >= 8


def test_the_lessons(atlas):
    listed = atlas.lessons()
    lesson = atlas.lesson(listed[0]["id"])
    assert lesson["id"] == listed[0]["id"] and len(lesson["steps"]) == listed[0]["steps"]
    assert atlas.check_lesson(json.dumps(lesson)) == lesson
    with pytest.raises(AtlasError) as broken:
        atlas.check_lesson("{")
    assert broken.value.status == 422


def test_core_attention_and_the_lab(atlas):
    q = np.eye(3, 4, dtype=np.float32)
    answer = atlas.core_attention(q, q, np.ones((3, 2)), mask="causal")
    assert answer["weights"].shape == (3, 3) and answer["output"].dtype == np.float32
    assert np.isnan(answer["masked_scores"][0, 2]) and answer["weights"][0, 2] == 0
    masks = atlas.lab("masks", n=4)
    assert masks["n"] == 4 and {m["kind"] for m in masks["masks"]} >= {"full", "causal"}
    with pytest.raises(ValueError, match="did you mean 'kv-cache'"):
        atlas.lab("kv_cache")


def test_one_head_and_one_token(atlas, minilm_tokens):
    n = len(minilm_tokens)
    detail = atlas.detail(MINILM_ID, TEXT, layer=1, head=3, temperature=2.0)
    assert detail["weights"].shape == (n, n) and detail["q"].shape == (n, 32)
    assert np.allclose(detail["weights"].sum(-1), 1, atol=1e-5)
    token = atlas.token(MINILM_ID, TEXT, token=2)
    assert token["as_query"].shape == (6, 12, n) and token["key_max"].shape == (6, n)
    tiles = atlas.tiles(MINILM_ID, TEXT, layer=0, heads=[0, 1], rows=[0, 4], cols=[2, n])
    assert tiles["values"].shape == (2, 4, n - 2) and tiles["col_tokens"] == minilm_tokens[2:]
    space = atlas.qkspace(MINILM_ID, TEXT, layer=2, head=0)
    assert space["heads"][0]["queries"].shape == (n, 2)


def test_heads_compared_searched_and_switched_off(atlas, minilm_tokens):
    n = len(minilm_tokens)
    compared = atlas.compare(MINILM_ID, TEXT, layer=0, head=0, other={"layer": 5, "head": 11})
    assert compared["aligned"] and compared["difference"].shape == (n, n)
    assert np.allclose(compared["difference"], compared["b"]["weights"] - compared["a"]["weights"],
                       atol=1e-6)  # fmt: skip
    found = atlas.search(MINILM_ID, TEXT, {"kind": "rank", "statistic": "entropy"}, limit=3)
    assert len(found) == 3 and found[0]["value"] >= found[-1]["value"]
    alike = atlas.similarity(MINILM_ID, TEXT)
    assert alike["similarity"].shape == (72, 72) and sorted(alike["order"]) == list(range(72))
    ablated = atlas.ablate(MINILM_ID, TEXT, [(0, 0), (0, 1)], layer=1, head=0)
    assert ablated["ablated"] == [{"layer": 0, "head": 0}, {"layer": 0, "head": 1}]
    assert ablated["weights"].shape == ablated["ablated_weights"].shape == (n, n)


def test_a_decoders_predictions_generation_and_streamed_pass(atlas):
    predictions = atlas.predictions(SMOLLM2_ID, "One, two, three", top_k=2)
    assert (
        predictions["kind"] == "next_token" and len(predictions["positions"][0]["candidates"]) == 2
    )
    lines = list(atlas.generate(SMOLLM2_ID, "One, two, three,", max_new_tokens=3))
    assert [line["event"] for line in lines] == ["token", "token", "token", "done"]
    assert lines[-1]["text"].startswith("One, two, three,") and lines[-1]["generated"] == 3
    passes = list(atlas.forward(SMOLLM2_ID, "A short pass, streamed."))
    assert passes[0]["event"] == "progress" and passes[-1]["event"] == "done"
    assert passes[-1]["num_layers"] == 30


def test_what_heads_write_as_arrays(atlas):
    text = "The capital of France is"
    lens = atlas.lens(SMOLLM2_ID, text, top_k=2, positions=[4])
    assert lens["token_probability"].shape == (31, 1) and lens["token"]["token"] == "␣Paris"
    found = atlas.attribution(SMOLLM2_ID, text, source={"layer": 23, "head": 4})
    assert found["heads"].shape == (30, 9) and found["source"]["values"].shape == (5,)
    assert abs(found["total"] - found["logit"]) < 1e-4
    patched = atlas.patching(SMOLLM2_ID, text, "The capital of Italy is", components="heads")
    assert patched["heads"].shape == (30, 9) and patched["stream"] is None
    lines = list(atlas.patching(SMOLLM2_ID, text, "The capital of Italy is", exact=True,
                                components="heads"))  # fmt: skip
    assert lines[0]["event"] == "progress" and lines[-1]["event"] == "done"
    assert lines[-1]["passes"] == 30 * 9 + 2


def test_a_score_taken_apart_as_arrays(atlas):
    """Issue 52: 'it' (10) to 'animal' (2) in MiniLM's layer 3 head 1, as POST /trace answers."""
    text = "The animal didn't cross the street because it was too tired."
    found = atlas.trace(MINILM_ID, text, layer=3, head=1, query=10, key=2, top=6)
    pieces = len(found["pieces"])
    assert found["trace"]["query_side"].shape == found["trace"]["key_side"].shape == (pieces,)
    side = len(found["shown"]) + 2
    assert found["trace"]["matrix"].shape == found["versus"]["matrix"].shape == (side, side)
    assert abs(found["parts_sum"] - found["score"]) <= found["bound"]
    assert abs(float(found["trace"]["matrix"].sum()) - found["score"]) <= found["bound"] + 1e-5
    assert found["weights"].argmax() == 2 and found["contrast"] == 0


def test_heads_working_together_as_arrays(atlas):
    """Issue 52: the circuit on MiniLM's sentence and, from the weights, its composition."""
    text = "The animal didn't cross the street because it was too tired."
    found = atlas.circuit(MINILM_ID, text, focus={"layer": 3, "head": 1}, top=10)
    assert found["node_totals"].shape == (3, 6, 12) and len(found["edges"]) == 10
    assert found["focus"]["totals"][2] == pytest.approx(1.0, abs=1e-5)
    composed = atlas.composition(MINILM_ID, kind="k", top=5)
    assert len(composed["edges"]) == 5
    status = atlas.composition_status(MINILM_ID)  # computed by the call above, kept
    assert (status["state"], status["fraction"]) == ("ready", 1.0)


def test_an_image_through_the_vision_transformer(atlas, tmp_path):
    """Issue 55: a sample image by its bytes or a file's path, its rows as arrays."""
    names = [sample["name"] for sample in atlas.image_samples()]
    cat = atlas.image_sample("chelsea")
    assert "chelsea" in names and cat.startswith(b"\xff\xd8")  # a JPEG
    found = atlas.image_attention(cat, query=5)
    assert found["weights"].shape == (12, 6, 257) and found["weights"].dtype.name == "float32"
    assert found["rollout"].shape == (257,) and found["distance"].shape == (12, 6)
    assert found["weights"].sum(axis=-1) == pytest.approx(1.0, abs=1e-4)
    (tmp_path / "cat.jpg").write_bytes(cat)
    again = atlas.image_attention(tmp_path / "cat.jpg", query=5)
    assert (again["weights"] == found["weights"]).all()


def test_refusals_say_why_with_the_servers_code(atlas):
    with pytest.raises(AtlasError) as unknown:
        atlas.attention("all-MiniLM-L6-v2", TEXT)
    assert unknown.value.status == 404 and unknown.value.code == "unknown_model"
    assert f"did you mean {MINILM_ID!r}" in unknown.value.detail
    with pytest.raises(AtlasError, match="did you mean 'temperature'") as typo:
        atlas.detail(MINILM_ID, TEXT, layer=0, head=0, temprature=2.0)
    assert typo.value.status == 422 and typo.value.code == "invalid_field"
    with pytest.raises(AtlasError) as encoder:  # refused when asked, not when first read
        atlas.generate(MINILM_ID, TEXT, max_new_tokens=2)
    assert encoder.value.status == 422 and "not a causal decoder" in encoder.value.detail
    with pytest.raises(AtlasError) as one_stack:
        atlas.decoder(MINILM_ID, TEXT, target="a target")
    assert one_stack.value.status == 422 and "not an encoder-decoder" in one_stack.value.detail


def test_a_server_out_of_reach_is_an_atlas_error_naming_its_url():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    client = AtlasClient(url, timeout=5)
    for call in (client.models, lambda: client.generate(SMOLLM2_ID, "Hi")):
        with pytest.raises(AtlasError) as caught:
            call()
        assert caught.value.status is None and url in str(caught.value)
        assert "make run" in caught.value.detail
