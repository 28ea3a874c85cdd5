"""POST /api/attention/lens, /attribution, /patching and /patching/exact: known answers on the
hand-built model (tests/support/handmade.py), the attribution identity and the lens's last row
on the embedded models, and every refusal before any work."""

from __future__ import annotations

import json
import threading
import time

import pytest

from atlas_engine import compute
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.writes import AttributionResponse, LensResponse, PatchingResponse
from atlas_engine.services.patching import PatchingDone
from tests.support.float32_json import assert_answer_is

pytestmark = pytest.mark.slow

COPY = "local/copy-previous"
CLEAN = " red green blue cat dog"  # head 0 at "cat" (position 3) copies "blue"
CORRUPTED = " red green sun cat dog"
EIFFEL = "The Eiffel Tower is in the city of"
IOI = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def post(client, path: str, schema, **body) -> dict:
    return assert_answer_is(schema, client.post(f"/api/attention/{path}", json=body))


def exact(client, **body) -> list[dict]:
    with client.stream("POST", "/api/attention/patching/exact", json=body) as response:
        assert response.status_code == 200, response.read()
        lines = [json.loads(line) for line in response.iter_lines() if line]
    PatchingDone.model_validate(lines[-1])
    return lines


def test_the_hand_built_copying_head_carries_the_whole_direct_attribution(client):
    """With a contrast word absent from the text, the logit difference is exactly what head 0
    copies (its write read through the final norm) and head 1, which writes nothing, has none."""
    answer = post(
        client, "attribution", AttributionResponse, model=COPY, text=CLEAN, position=3,
        target={"text": " blue"}, contrast={"text": " moon"}, source={"layer": 0, "head": 0},
    )  # fmt: skip
    assert answer["target"]["token"] == "␣blue" and answer["candidates"][0]["token"] == "␣blue"
    heads = answer["heads"][0]
    assert heads[1] == 0.0
    assert heads[0] == pytest.approx(answer["logit"], rel=1e-6)
    assert answer["embeddings"] == pytest.approx(0.0, abs=1e-9)
    assert answer["total"] == pytest.approx(answer["logit"], rel=1e-6)
    split = answer["source"]["values"]  # all of it from the previous token, "blue"
    assert split[2] == pytest.approx(heads[0], rel=1e-5) and abs(sum(split) - split[2]) < 1e-3


def test_patching_the_copying_head_restores_the_clean_answer_and_the_other_head_nothing(client):
    body = {"model": COPY, "text": CLEAN, "corrupted": CORRUPTED, "position": 3}
    lines = exact(client, **body)
    progress, done = lines[:-1], lines[-1]
    assert [p["layer"] for p in progress] == [0, 1, 2] and progress[-1]["layers"] == 2
    assert (done["target"], done["contrast"]) == ("␣blue", "␣sun")
    assert done["clean"] > 0 > done["corrupted"]
    assert done["heads"] == [[1.0, 0.0]]  # exactly: head 0's output is the clean run's
    assert done["stream"] == [[0.0, 0.0, 0.0, 1.0, 0.0]]  # the stream at "cat" carries it all
    assert done["differ"] == [2] and done["passes"] == 2 + 2 + 5
    approx = post(client, "patching", PatchingResponse, **body)
    assert approx["method"] == "attribution" and approx["heads"][0][1] == 0.0
    assert 0.5 < approx["heads"][0][0] <= 1.0  # the gradient's estimate of the same 1.0


def test_attribution_sums_to_the_real_logit_on_smollm2(client):
    answer = post(
        client, "attribution", AttributionResponse, model=SMOLLM2_ID, text=EIFFEL,
        source={"layer": 20, "head": 0},
    )  # fmt: skip
    assert answer["target"]["token"] == "␣Paris"
    assert len(answer["heads"]) == 30 and len(answer["heads"][0]) == 9
    assert answer["total"] == pytest.approx(answer["logit"], abs=2e-6 * abs(answer["logit"]))
    split = answer["source"]["values"]
    assert sum(split) == pytest.approx(answer["heads"][20][0], rel=1e-5, abs=1e-6)
    contrast = post(
        client, "attribution", AttributionResponse, model=SMOLLM2_ID, text=IOI,
        target={"text": " Mary"}, contrast={"text": " John"},
    )  # fmt: skip
    assert contrast["logit"] > 0  # the model prefers the indirect object
    assert contrast["total"] == pytest.approx(contrast["logit"], abs=2e-6 * 20)


def test_the_lens_last_row_is_the_models_own_prediction(client):
    lens = post(client, "lens", LensResponse, model=SMOLLM2_ID, text=EIFFEL, top_k=3)
    own = client.post(
        "/api/attention/predictions", json={"model": SMOLLM2_ID, "text": EIFFEL, "top_k": 3}
    ).json()
    assert len(lens["rows"]) == 31 and lens["rows"][0] == "embeddings"
    assert lens["final_norm"] == "LlamaRMSNorm"
    assert lens["token"]["token"] == "␣Paris"
    for position, row in zip(lens["positions"], lens["top"][-1], strict=True):
        expected = own["positions"][position]["candidates"]
        assert [c["token_id"] for c in row] == [c["token_id"] for c in expected]
        for mine, theirs in zip(row, expected, strict=True):
            assert mine["probability"] == pytest.approx(theirs["probability"], abs=1e-6)
    assert lens["token_rank"][-1][-1] == 1 and lens["token_rank"][0][-1] > 1
    masked = post(client, "lens", LensResponse, model="local/bert-mlm", text="it is [MASK] .")
    assert masked["predicts"] == "masked" and len(masked["positions"]) == 1
    assert masked["top"][-1][0][0]["token"] == "paris"  # the head's bias, at the last row


def test_the_ioi_patching_grid_is_computed_on_smollm2(client):
    answer = post(
        client, "patching", PatchingResponse, model=SMOLLM2_ID, text=IOI,
        corrupted=IOI_CORRUPTED, components="stream",
    )  # fmt: skip
    assert (answer["target"], answer["contrast"]) == ("␣Mary", "␣John")
    assert answer["heads"] is None and len(answer["stream"]) == 30
    last = answer["stream"][-1]  # the last stream at the metric's position is the metric
    assert last[-1] == pytest.approx(1.0, abs=0.15) and last[0] == 0.0


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("lens", {"model": MINILM_ID, "text": EIFFEL}, "has no masked-language-model head"),
        ("attribution", {"model": "local/bert-mlm", "text": "a [MASK] ."}, "not one linear map"),
        ("attribution", {"model": SMOLLM2_ID, "text": EIFFEL, "target": {"text": " New York"}},
         "is 2 tokens"),
        ("attribution", {"model": SMOLLM2_ID, "text": EIFFEL, "target": {"id": 10**7}},
         "not in the vocabulary"),
        ("attribution", {"model": SMOLLM2_ID, "text": EIFFEL, "position": 40}, "past the text"),
        ("attribution", {"model": SMOLLM2_ID, "text": EIFFEL, "source": {"layer": 30, "head": 0}},
         "layer"),
        ("lens", {"model": SMOLLM2_ID, "text": "word " * 400}, "256"),
        ("patching", {"model": SMOLLM2_ID, "text": IOI, "corrupted": "When Mary left"},
         "must line up"),
        ("patching", {"model": SMOLLM2_ID, "text": IOI, "corrupted": IOI}, "same"),
        ("patching", {"model": SMOLLM2_ID, "text": IOI, "corrupted": IOI_CORRUPTED,
                      "target": {"text": " Mary Ann"}}, "is 2 tokens"),
        ("patching", {"model": SMOLLM2_ID, "text": "word " * 80, "corrupted": "word " * 80}, "64"),
        ("patching/exact", {"model": COPY, "text": CLEAN, "corrupted": " red green"},
         "must line up"),
        ("patching/exact", {"model": SMOLLM2_ID, "text": IOI, "corrupted": IOI}, "same"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_before_any_work(client, path, body, says):
    response = client.post(f"/api/attention/{path}", json=body)
    assert response.status_code == 422, response.text
    assert says in response.json()["detail"]


def test_exact_patching_refused_by_the_queue_gets_its_status_not_a_200_with_an_error_line(
    client,
):
    """Issue 50: of 8 concurrent exact patching runs, 6 answered 200 with only an error line
    inside: the run was admitted to the heavy lane after its stream had begun. Now it is
    queued before, so this client's share being full is the answer's own 429."""
    started, release = threading.Event(), threading.Event()

    def long_job():  # this client's long job holds the lane for 10 s, letting short jobs in
        started.set()
        ends = time.monotonic() + 10
        while not release.wait(0.01) and time.monotonic() < ends:
            compute.run_beside()

    body = {"model": SMOLLM2_ID, "text": IOI, "corrupted": IOI_CORRUPTED}
    post(client, "patching", PatchingResponse, **body)  # the model is loaded: its check is short
    holding = compute._heavy.submit(long_job, seconds=100.0, model=SMOLLM2_ID, client="testclient")
    try:
        assert started.wait(10)
        response = client.post("/api/attention/patching/exact", json=body)
    finally:
        release.set()
        holding.result(10)
    assert response.status_code == 429, response.text
    assert response.json()["code"] == "rate_limited" and int(response.headers["Retry-After"]) > 1
    assert client.app.state.answer_budget.held_bytes == 0  # its reservation let go


def test_exact_patching_stops_between_batches_at_shutdown_with_a_503_line(client, monkeypatch):
    """On SIGTERM exact patching used the whole grace and its client saw a cut stream: its loop
    never stopped. Now it stops before its next batched rerun, and its last line says 503."""
    monkeypatch.setattr(compute, "_shutting_down", threading.Event())  # this test's own flag
    body = {"model": SMOLLM2_ID, "text": IOI, "corrupted": IOI_CORRUPTED, "components": "both"}
    lines = []
    with client.stream("POST", "/api/attention/patching/exact", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            lines.append(json.loads(line))
            if len(lines) == 2:  # two batches under way: the server begins to stop
                compute._shutting_down.set()
    assert lines[-1]["event"] == "error" and lines[-1]["status"] == 503, lines[-1]
    assert "shutting down" in lines[-1]["detail"]
    assert len(lines) <= 4, lines  # the run stopped at once, of its 60 batches
    assert client.app.state.answer_budget.held_bytes == 0


def test_a_token_must_be_named_one_way(client):
    both = {"model": SMOLLM2_ID, "text": EIFFEL, "target": {"id": 5, "text": " a"}}
    assert client.post("/api/attention/attribution", json=both).status_code == 422
    neither = {**both, "target": {}}
    assert client.post("/api/attention/attribution", json=neither).status_code == 422


def test_the_lens_reads_the_positions_asked_for(client):
    whole = post(client, "lens", LensResponse, model=SMOLLM2_ID, text=EIFFEL, top_k=2)
    some = post(client, "lens", LensResponse, model=SMOLLM2_ID, text=EIFFEL, top_k=2,
                positions=[8, 2])  # fmt: skip
    assert some["positions"] == [2, 8]
    for row_whole, row_some in zip(whole["top"], some["top"], strict=True):
        assert [row_whole[2], row_whole[8]] == row_some
    wrong = client.post("/api/attention/lens", json={"model": SMOLLM2_ID, "text": EIFFEL,
                                                       "positions": [9]})  # fmt: skip
    assert wrong.status_code == 422 and "positions 0 to 8" in wrong.json()["detail"]
