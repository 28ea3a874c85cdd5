"""POST /api/attention/trace: a known answer on the hand-built model, the identity and the
stories the notes tell on the embedded models (MiniLM's 'it' -> 'animal', SmolLM2's induction
head), and every refusal before any work."""

from __future__ import annotations

import pytest

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.trace import ANIMAL, TraceResponse
from tests.support.float32_json import assert_answer_is

pytestmark = pytest.mark.slow

COPY = "local/copy-previous"
WORDS = " red green blue cat dog"
REPEATED = (
    "Listen: violet engine copper hollow maple signal drift canyon. violet engine copper hollow "
    "maple signal drift canyon."
)


def trace(client, **body) -> dict:
    answer = assert_answer_is(TraceResponse, client.post("/api/attention/trace", json=body))
    assert abs(answer["parts_sum"] - answer["score"]) <= answer["bound"]
    for sides in (answer["trace"], answer["versus"]):
        if sides is not None:
            total = sides["score"] - sides["position_bias"]
            for parts in (
                sides["query_side"],
                sides["key_side"],
                [v for row in sides["matrix"] for v in row],
            ):
                assert abs(sum(parts) - total) <= answer["bound"]
    return answer


def label(answer, index):
    return "every other piece" if index < 0 else answer["pieces"][index]["label"]


def test_the_hand_built_previous_token_head_meets_position_with_position(client):
    answer = trace(client, model=COPY, text=WORDS, layer=0, head=0, query=3, key=2)
    assert answer["weight"] > 0.99 and answer["contrast"] is not None
    top = answer["trace"]["pairs"][0]
    assert label(answer, top["query_piece"]) == label(answer, top["key_piece"])
    assert label(answer, top["key_piece"]) == "position embedding"
    assert "position embedding of '␣blue'" in answer["summary"][0]


def test_minilm_it_attends_to_animal_and_the_parts_add_up(client):
    answer = trace(client, model=MINILM_ID, text=ANIMAL, layer=3, head=1, query=10, key=2)
    assert answer["tokens"][10] == "it" and answer["tokens"][2] == "animal"
    assert answer["weight"] > 0.5  # the explorer's example: this head's strongest 'it' -> 'animal'
    kinds = {p["kind"] for p in answer["pieces"]}
    assert kinds == {"embedding", "head", "mlp", "bias"}
    assert len(answer["pieces"]) == 3 + 3 * 13 + 1  # 3 embeddings, 3 layers of 12 heads + MLP


def test_smollm2s_induction_head_reads_a_previous_token_heads_output_through_its_key(client):
    """L18 H6 at the second 'hollow' attends to the first copy's next word, 'maple': the key
    side's largest piece is an earlier head's output at 'maple', and that head looks at the
    token before 'maple' (a previous-token head), the induction circuit's K-composition."""
    tokens = trace(client, model=SMOLLM2_ID, text=REPEATED, layer=0, head=0, query=4, key=4)
    query = [i for i, t in enumerate(tokens["tokens"]) if t == "␣hollow"][1]
    key = next(i for i, t in enumerate(tokens["tokens"]) if t == "␣maple")
    answer = trace(client, model=SMOLLM2_ID, text=REPEATED, layer=18, head=6, query=query, key=key)
    assert answer["weight"] > 0.5
    side = answer["trace"]["key_side"]
    best = max(range(len(side)), key=lambda i: abs(side[i]))
    piece = answer["pieces"][best]
    assert piece["kind"] == "head" and side[best] > 0.5 * answer["score"]
    earlier = trace(
        client, model=SMOLLM2_ID, text=REPEATED, layer=piece["layer"], head=piece["head"],
        query=key, key=key - 1,
    )  # fmt: skip
    assert max(earlier["weights"]) == earlier["weight"]  # it reads the token before 'maple'


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"query": 2, "key": 3}, "may not read key 3"),
        ({"query": 9}, "past the text's last token"),
        ({"contrast": 2}, "contrast key 2"),
        ({"layer": 1}, "layer"),
        ({"text_pair": "and more"}, "one text"),
    ],
)
def test_bad_traces_are_refused_with_a_reason(client, change, message):
    body = {"model": COPY, "text": WORDS, "layer": 0, "head": 0, "query": 3, "key": 2, **change}
    response = client.post("/api/attention/trace", json=body)
    assert response.status_code == 422 and message in response.text, response.text


def test_an_oversized_top_is_a_schema_error(client):
    body = {"model": COPY, "text": WORDS, "layer": 0, "head": 0, "query": 3, "key": 2, "top": 25}
    assert client.post("/api/attention/trace", json=body).status_code == 422
