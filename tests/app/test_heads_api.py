"""POST /api/attention/heads on the embedded models: the heads whose jobs are known."""

import pytest
import torch

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from attention_core.head_stats import STATISTICS

TEXT = "The animal didn't cross the street because it was too tired."


def heads(client, model, text=TEXT):
    response = client.post("/api/attention/heads", json={"model": model, "text": text})
    assert response.status_code == 200, response.text[:300]
    return response.json()


def top_role(body, layer, head):
    roles = body["roles"][layer][head]
    return roles[0] if roles else None


def test_minilm_layer_0_head_2_is_a_previous_token_head(client):
    body = heads(client, MINILM_ID)
    assert set(body["statistics"]) == set(STATISTICS)
    assert len(body["statistics"]["entropy"]) == 6 and len(body["statistics"]["entropy"][0]) == 12
    assert top_role(body, 0, 2)["role"] == "previous-token"
    assert top_role(body, 0, 2)["score"] > 0.95


def test_smollm2_known_heads_and_its_induction_heads(client):
    body = heads(client, SMOLLM2_ID)
    assert (body["num_layers"], body["num_heads"], body["num_kv_heads"]) == (30, 9, 3)
    previous = body["statistics"]["previous"]
    best = max((previous[layer][h], layer, h) for layer in range(30) for h in range(9))
    assert best[1:] == (16, 0) and top_role(body, 16, 0)["role"] == "previous-token"
    assert top_role(body, 18, 8) == {
        "role": "first-token (sink)",
        "score": pytest.approx(1, abs=1e-3),
    }
    assert body["statistics"]["induction"][0][0] is None  # no token repeats in this sentence

    text = client.get(f"/api/models/{SMOLLM2_ID}/induction-text?length=40&seed=0").json()["text"]
    words = text.split(" ")
    assert words[0] == "" and words[1:41] == words[41:]  # every word after a space
    repeated = heads(client, SMOLLM2_ID, text)
    assert len(repeated["tokens"]) == 80  # random tokens written twice: 40 pieces each
    assert repeated["tokens"][40:] == repeated["tokens"][:40]  # the first word's too
    induction = [
        (layer, h)
        for layer in range(30)
        for h in range(9)
        if any(r["role"] == "induction" for r in repeated["roles"][layer][h])
    ]
    assert (18, 6) in induction and len(induction) >= 3, induction


def count_role(body, role):
    return sum(any(r["role"] == role for r in head) for layer in body["roles"] for head in layer)


def test_roles_tell_heads_apart_on_natural_text(client):
    """Issue 37: on a plain sentence the sink role goes to the heads that park nearly all of a
    row on the first token (55 of SmolLM2's 270, not the 211 that give it half), induction needs
    a repeated span (a word used twice is not one), and the head the explorer opens first is
    MiniLM's previous-token head 0.2."""
    smol, mini = heads(client, SMOLLM2_ID), heads(client, MINILM_ID)
    assert count_role(smol, "first-token (sink)") == 55
    first = [v for layer in smol["statistics"]["first"] for v in layer]
    assert sum(v >= 0.5 for v in first) == 211  # what the old threshold labelled
    mary = "When Mary and John went to the store, John gave a drink to Mary."
    for model in (SMOLLM2_ID, MINILM_ID):
        body = heads(client, model, mary)  # "Mary", "John" and "to" twice, each alone
        assert count_role(body, "induction") == 0
        assert all(v is None for layer in body["statistics"]["induction"] for v in layer)
    assert mini["clearest"] == {
        "layer": 0, "head": 2, "role": "previous-token", "statistic": "previous",
        "score": pytest.approx(0.99986, abs=1e-4), "threshold": 0.5,
    }  # fmt: skip
    twice = "Listen: violet engine copper hollow maple signal drift canyon. " * 2
    clearest = heads(client, SMOLLM2_ID, twice.strip())["clearest"]
    assert (clearest["layer"], clearest["head"], clearest["role"]) == (18, 6, "induction")


def test_heads_refuses_what_the_maps_refuse(client):
    assert (
        client.post("/api/attention/heads", json={"model": "nope", "text": "a"}).status_code == 404
    )
    empty = client.post("/api/attention/heads", json={"model": MINILM_ID, "text": " "})
    assert empty.status_code == 422 and empty.json()["code"] == "invalid_field"
    bad = client.get(f"/api/models/{SMOLLM2_ID}/induction-text?length=2")
    assert bad.status_code == 422


def test_following_a_token_answers_what_it_attends_to_in_every_layer(client):
    body = client.post(
        "/api/attention/token", json={"model": MINILM_ID, "text": TEXT, "token": 10}
    ).json()
    maps = client.post(
        "/api/attention", json={"model": MINILM_ID, "text": TEXT, "layers": [3], "heads": [5]}
    ).json()["attentions"][0][0]
    assert body["tokens"][10] == "it"
    assert body["as_query"][3][5] == pytest.approx(maps[10], abs=1e-6)
    assert body["as_key"][3][5] == pytest.approx([row[10] for row in maps], abs=1e-6)
    assert len(body["query_mean"]) == 6 and sum(body["query_mean"][2]) == pytest.approx(1, abs=1e-4)
    too_far = client.post(
        "/api/attention/token", json={"model": MINILM_ID, "text": TEXT, "token": 99}
    )
    assert too_far.status_code == 422 and too_far.json()["code"] == "input_rule"


def search(client, model, query, **extra):
    response = client.post(
        "/api/attention/search", json={"model": model, "text": TEXT, "query": query, **extra}
    )
    assert response.status_code == 200, response.text[:300]
    return response.json()


def test_search_finds_heads_by_pair_role_and_rank(client):
    sink = search(client, SMOLLM2_ID, {"kind": "pair", "source": 10, "target": 0, "above": 0.99})
    assert {"layer": 18, "head": 8} in [{k: h[k] for k in ("layer", "head")} for h in sink["heads"]]
    assert all(h["value"] > 0.99 for h in sink["heads"])
    previous = search(client, SMOLLM2_ID, {"kind": "role", "role": "previous-token"})
    assert (previous["heads"][0]["layer"], previous["heads"][0]["head"]) == (16, 0)
    ranked = search(client, MINILM_ID, {"kind": "rank", "statistic": "previous"}, limit=3)
    assert ranked["matches"] == 72 and len(ranked["heads"]) == 3
    assert (ranked["heads"][0]["layer"], ranked["heads"][0]["head"]) == (0, 2)
    values = [h["value"] for h in ranked["heads"]]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize(
    "query,status",
    [
        ({"kind": "pair", "source": 99, "target": 0}, 422),
        ({"kind": "role", "role": "wizard"}, 422),
        ({"kind": "rank", "statistic": "previous", "order": "sideways"}, 422),
        ({"kind": "telepathy"}, 422),
    ],
)
def test_search_refuses_what_it_cannot_answer(client, query, status):
    response = client.post(
        "/api/attention/search", json={"model": MINILM_ID, "text": TEXT, "query": query}
    )
    assert response.status_code == status, response.text[:200]


def test_statistics_stop_between_blocks_when_the_client_has_gone(app):
    """A long text's statistics take seconds a layer: a client that leaves stops them at the
    next block of rows, and nothing half-done is kept with the pass."""
    from atlas_engine.errors import RequestCancelled
    from atlas_engine.inference.forward import run_forward
    from atlas_engine.services.head_statistics import statistics_of

    loaded = app.state.manager.get(SMOLLM2_ID)
    result = run_forward(loaded, TEXT)
    asked = []

    def gone() -> bool:
        asked.append(1)
        return len(asked) > 3  # the client leaves during the fourth block

    with pytest.raises(RequestCancelled):
        statistics_of(loaded, result, should_stop=gone)
    assert len(result.statistics) == 3  # the three layers finished before it left
    assert statistics_of(loaded, result, [0, 1, 2]).values["entropy"].shape == (3, 9)


def test_bad_layers_and_marks_are_refused_before_any_work(client, monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("a forward pass ran for a bad request")

    monkeypatch.setattr("atlas_engine.services.passes.run_forward", never)
    text = "A sentence nobody has sent, so that only a forward pass could answer it."
    for layers, words in [([6], "out of range"), ([], "at least 1"), ([1, 1], "repeats")]:
        body = {"model": MINILM_ID, "text": text, "layers": layers}
        response = client.post("/api/attention/heads", json=body)
        assert response.status_code == 422, response.text
        assert words in response.text, response.text
    for extra, words in [
        ({"marked": [60]}, "out of range"),
        ({"marked": [1], "read_from": [60]}, "out of range"),
        ({"read_from": [1]}, "mark some"),
    ]:
        response = client.post(
            "/api/attention/heads", json={"model": MINILM_ID, "text": text} | extra
        )
        assert response.status_code == 422, response.text
        assert words in response.text, response.text
    monkeypatch.undo()
    good = client.post(
        "/api/attention/heads", json={"model": MINILM_ID, "text": TEXT, "layers": [5, 0]}
    )
    assert good.status_code == 200 and good.json()["layers"] == [5, 0]


def marked_by_hand(maps: torch.Tensor, marked: list[int], causal: bool) -> torch.Tensor:
    """(layers, heads): the mean share on the marked keys over rows not marked themselves
    (and, causal, after the first marked token), from every map of the text."""
    seq = maps.shape[-1]
    rows = [q for q in range(seq) if q not in marked and (not causal or q > min(marked))]
    return maps[:, :, rows][..., marked].sum(-1).mean(-1)


@pytest.mark.parametrize("model", [MINILM_ID, SMOLLM2_ID, "local/gptneo-tiny"])
def test_marked_tokens_add_each_heads_share_on_them_and_change_nothing_else(client, model):
    """Three tokens marked: the share every head gives them equals the maps' own, whether the
    maps are replayed (MiniLM an encoder, SmolLM2 a decoder) or kept (GPT-Neo, not replayed), in
    the same pass as the statistics or after they are kept; the other statistics are the same
    with or without them."""
    text = "The animal didn't cross the street because it was too tired, so the street waited."
    plain = heads(client, model, text)
    marked = [4, 5, len(plain["tokens"]) // 2 + 3]
    answer = client.post(
        "/api/attention", json={"model": model, "text": text, "format": "json"}
    ).json()
    expected = marked_by_hand(torch.tensor(answer["attentions"]), marked, plain["causal"])

    # A layer's statistics already kept (by the request above): the share needs its own pass.
    body = {"model": model, "text": text, "marked": marked}
    kept = client.post("/api/attention/heads", json=body | {"layers": [1, 0]}).json()
    assert kept["layers"] == [1, 0] and "from elsewhere" in kept["descriptions"]["marked"]
    got = torch.tensor(kept["statistics"]["marked"])
    assert torch.allclose(got, expected[[1, 0]], atol=1e-5), (got - expected[[1, 0]]).abs().max()
    for name in STATISTICS:
        assert kept["statistics"][name] == [plain["statistics"][name][i] for i in (1, 0)]

    # A new text: statistics and share in one pass over each layer's blocks.
    again = text + " It rested."
    fresh = client.post("/api/attention/heads", json=body | {"text": again}).json()
    answer = client.post(
        "/api/attention", json={"model": model, "text": again, "format": "json"}
    ).json()
    expected = marked_by_hand(torch.tensor(answer["attentions"]), marked, plain["causal"])
    got = torch.tensor(fresh["statistics"]["marked"])
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    assert fresh["statistics"]["entropy"] == heads(client, model, again)["statistics"]["entropy"]


def test_marked_tokens_outside_the_text_or_repeated_are_refused(client):
    for extra, words in [
        ({"marked": [40]}, "out of range"),
        ({"marked": [2, 2]}, "repeats"),
        ({"marked": []}, "at least 1"),
        ({"marked": [2], "read_from": [40]}, "out of range"),
        ({"read_from": [3]}, "mark some"),
    ]:
        body = {"model": MINILM_ID, "text": TEXT, **extra}
        response = client.post("/api/attention/heads", json=body)
        assert response.status_code == 422, response.text
        assert words in response.text, response.text


FILLER = (
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
)
PASS_KEY = (
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it "
    "and memorise it."
    + FILLER * 2
    + " The pass key is 71432. Remember it. 71432 is the pass key."
    + FILLER * 6
    + " What is the pass key? The pass key is"
)


def test_read_from_the_question_retrieval_heads_give_the_pass_key_most_of_their_attention(client):
    """SmolLM2 on a pass-key text: from its last token, which asks for the key, heads 22.4 and
    23.2 give the key's two mentions more weight than any other head (the same numbers as the
    last row of their maps), while over every later row their mean stays small."""
    tokens = heads(client, SMOLLM2_ID, PASS_KEY)["tokens"]
    n = len(tokens)
    starts = [i for i in range(n) if "".join(tokens[i : i + 5]).strip("␣") == "71432"]
    assert len(starts) == 2
    marked = [i + digit for i in starts for digit in range(5)]
    body = {"model": SMOLLM2_ID, "text": PASS_KEY, "marked": marked}
    asked = client.post("/api/attention/heads", json=body | {"read_from": [n - 1]}).json()
    assert "chosen query rows" in asked["descriptions"]["marked"]
    grid = asked["statistics"]["marked"]
    ranked = sorted(((v, layer, h) for layer, row in enumerate(grid) for h, v in enumerate(row)))
    top = ranked[::-1][:2]
    assert {(layer, h) for _, layer, h in top} == {(22, 4), (23, 2)}, top
    for value, layer, head in top:
        tile = {"rows": [n - 1, n], "cols": [0, n], "layer": layer, "heads": [head]}
        row = client.post(
            "/api/attention/tiles", json={"model": SMOLLM2_ID, "text": PASS_KEY} | tile
        ).json()["values"][0][0]
        assert value == pytest.approx(sum(row[i] for i in marked), abs=1e-5)
        assert value > 0.4
    everywhere = client.post("/api/attention/heads", json=body).json()["statistics"]["marked"]
    assert all(everywhere[layer][h] < value / 4 for value, layer, h in top)


def test_marking_the_last_token_of_a_decoder_leaves_no_row_to_read_it(client):
    """No row comes after it: the share is null for every head, whether the statistics are
    computed with it or were kept before."""
    text = "Nothing reads the last token of this sentence"
    first = {"model": SMOLLM2_ID, "text": text, "layers": [0]}
    n = len(client.post("/api/attention/heads", json=first).json()["tokens"])
    body = {"model": SMOLLM2_ID, "text": text, "marked": [n - 1], "layers": [3]}
    for _ in range(2):  # layer 3's statistics computed with it, then kept
        response = client.post("/api/attention/heads", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["statistics"]["marked"] == [[None] * 9]
