"""POST /api/attention: formats, tokens, segments, caching and every refusal."""

import threading

import pytest
import torch

from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.attention import MAX_TEXT_CHARS, DetailResponse
from atlas_engine.serialize import F16_ERROR_BOUND, U8_ERROR_BOUND, decode_binary, sending_overhead
from tests.support.float32_json import assert_answer_is, assert_float32_numbers

TEXT = "The cat sat on the mat because it was tired."


def post(client, **body):
    return client.post("/api/attention", json={"model": MINILM_ID, "text": TEXT, **body})


def test_models_list_has_the_required_fields(client):
    body = client.get("/api/models").json()
    ids = {m["id"]: m for m in body["models"]}
    for required in (MINILM_ID, SMOLLM2_ID, "bert-base-uncased", "gpt2", "distilgpt2"):
        assert required in ids
    minilm = ids[MINILM_ID]
    assert minilm["family"] == "bert" and minilm["causal"] is False
    assert (minilm["num_layers"], minilm["num_heads"], minilm["num_kv_heads"]) == (6, 12, 12)
    assert minilm["max_tokens"] == 512 and minilm["available"] and minilm["embedded"]
    gpt2 = ids["gpt2"]
    assert (
        gpt2["available"] is False and "huggingface-cli download gpt2" in gpt2["unavailable_reason"]
    )
    local = ids["local/gpt2-tiny"]
    assert (local["family"], local["num_layers"], local["num_heads"]) == ("gpt2", 2, 4)


@pytest.mark.parametrize(
    "fmt,bound", [("f32", 0.0), ("f16", F16_ERROR_BOUND), ("u8", U8_ERROR_BOUND)]
)
def test_binary_formats_decode_within_their_bound(client, fmt, bound):
    exact = post(client).json()
    response = post(client, format=fmt)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/vnd.attention-atlas.maps"
    meta, weights = decode_binary(response.content)
    assert meta["tokens"] == exact["tokens"] and meta["error_bound"] == bound
    assert meta["shape"] == [6, 12, len(exact["tokens"]), len(exact["tokens"])]
    error = (weights - torch.tensor(exact["attentions"])).abs().max().item()
    assert error <= bound
    assert len(response.content) < len(str(exact["attentions"]))


def test_binary_is_much_smaller_than_json_for_long_input(client):
    long_text = " ".join(["attention"] * 250)
    json_size = len(post(client, text=long_text, layers=[0]).content)
    u8_size = len(post(client, text=long_text, layers=[0], format="u8").content)
    seq = 252
    assert u8_size < 12 * seq * seq + 20_000
    assert json_size > 5 * u8_size


def test_every_answer_gives_back_its_reservation(client, app):
    """A short answer is made whole on its lane and sent at once (its length stated); a long
    one streams piece by piece. Either way the bytes it reserved are free once it is read."""
    budget = app.state.answer_budget

    def read(**body):  # uncompressed, so content-length counts the body's own bytes
        response = client.post(
            "/api/attention",
            json={"model": MINILM_ID, **body},
            headers={"accept-encoding": "identity"},
        )
        assert response.status_code == 200, response.text
        return response

    short = read(text="A short answer.", format="u8")
    assert int(short.headers["content-length"]) == len(short.content)
    assert budget.held_bytes == 0
    long_text = " ".join(["streamed"] * 200)
    streamed = read(text=long_text, format="f32")  # 6 x 12 x 202^2 weights: 11.8 MB
    assert int(streamed.headers["content-length"]) == len(streamed.content) > 11_000_000
    _, weights = decode_binary(streamed.content)
    assert weights.shape == (6, 12, 202, 202)
    assert budget.held_bytes == 0


LONG = " ".join(["reserved"] * 200)
UNKNOWN_WORD = "a" * 8000  # one [UNK] to MiniLM: 3 tokens, but 8,000 characters in the answer
JSON_ANSWERS = [
    pytest.param("detail", {"model": MINILM_ID, "text": LONG, "layer": 1, "head": 2, "query": 3}),
    pytest.param("tiles", {"model": MINILM_ID, "text": LONG, "layer": 1, "heads": [0, 1]}),
    pytest.param("compare", {
        "model": MINILM_ID, "text": LONG, "layer": 1, "head": 2,
        "other": {"text": LONG.replace("reserved", "kept", 1), "layer": 1, "head": 2},
    }),
    pytest.param("compare", {
        "model": MINILM_ID, "text": UNKNOWN_WORD, "layer": 1, "head": 2,
        "other": {"text": UNKNOWN_WORD + "b", "layer": 1, "head": 2},
    }, id="compare-long-word"),
    pytest.param("ablate", {
        "model": SMOLLM2_ID, "text": LONG, "heads": [{"layer": 0, "head": 1}], "layer": 1, "head": 2,
    }),
]  # fmt: skip


@pytest.mark.parametrize("route,body", JSON_ANSWERS)
def test_a_json_answer_is_reserved_whole_until_it_is_sent(client, app, monkeypatch, route, body):
    """The JSON answers built whole (one head in depth, windows, comparisons, ablations) reserve
    a bound on their bytes in the in-flight budget before they are built, from the request, and
    hold it until they are sent: a reader that stalls holds no more than the budget allows."""
    budget = app.state.answer_budget
    reserved = []
    real_reserve = budget.reserve

    def reserve(key, nbytes):
        if key[0] == "answer":
            reserved.append(nbytes)
        return real_reserve(key, nbytes)

    monkeypatch.setattr(budget, "reserve", reserve)
    response = client.post(
        f"/api/attention/{route}", json=body, headers={"accept-encoding": "identity"}
    )
    assert response.status_code == 200, response.text
    assert int(response.headers["content-length"]) == len(response.content) > 6_000
    assert len(reserved) == 1
    bound = answer_part(reserved[0])  # the rest is what sending it holds (sending_overhead)
    assert len(response.content) <= bound
    # a bound, not a wild guess (a character of text is bounded at 6 bytes, its \u escape)
    assert bound < max(7 * len(response.content), 64_000)
    assert budget.held_bytes == 0


def answer_part(reserved: int) -> int:
    """n where n + sending_overhead(n) == reserved (it grows with n: found by bisection)."""
    low, high = 0, reserved
    while low < high:
        middle = (low + high) // 2
        if middle + sending_overhead(middle) < reserved:
            low = middle + 1
        else:
            high = middle
    assert low + sending_overhead(low) == reserved
    return low


def test_layer_and_head_selection(client):
    body = post(client, layers=[5, 0], heads=[3]).json()
    full = post(client).json()
    assert body["layers"] == [5, 0] and body["heads"] == [3]
    assert body["attentions"][0][0] == full["attentions"][5][3]
    assert body["attentions"][1][0] == full["attentions"][0][3]


def test_special_tokens_and_subwords_are_readable(client):
    body = post(client, text="Tokenization is unbelievable").json()
    assert body["tokens"][0] == "[CLS]" and body["tokens"][-1] == "[SEP]"
    assert body["special_tokens"][0] and not body["special_tokens"][1]
    assert any(t.startswith("##") for t in body["tokens"])


def test_gpt2_spaces_are_shown_readably(client):
    body = client.post(
        "/api/attention", json={"model": "local/gpt2-tiny", "text": "Hello big world"}
    ).json()
    assert body["raw_tokens"] == ["Hello", "Ġbig", "Ġworld"]
    assert body["tokens"] == ["Hello", "␣big", "␣world"]


def test_sentence_pairs_have_segments(client):
    body = post(client, text="The cat sat.", text_pair="It was tired.").json()
    tokens, segments = body["tokens"], body["segments"]
    assert tokens.count("[SEP]") == 2
    first_sep = tokens.index("[SEP]")
    assert set(segments[: first_sep + 1]) == {0} and set(segments[first_sep + 1 :]) == {1}
    roberta = client.post(
        "/api/attention",
        json={"model": "local/roberta-tiny", "text": "The cat sat.", "text_pair": "It was tired."},
    ).json()
    assert roberta["segments"][0] == 0 and roberta["segments"][-1] == 1


def test_sentence_pairs_refused_for_decoders(client):
    response = client.post(
        "/api/attention", json={"model": "local/gpt2-tiny", "text": "a", "text_pair": "b"}
    )
    assert response.status_code == 422
    assert "BERT-family" in response.json()["detail"]


@pytest.fixture
def forward_calls(monkeypatch):
    """A list that grows by one for every forward pass the service runs."""
    import atlas_engine.services.passes as service

    calls = []
    real = service.run_forward

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "run_forward", counting)
    return calls


def test_repeated_requests_are_cached_and_run_one_forward_pass(client, forward_calls):
    calls = forward_calls
    text = "A sentence that nobody has sent before, for the cache test."
    first = post(client, text=text, layers=[2], heads=[1])
    assert first.json()["cached"] is False
    second = post(client, text=text, layers=[4])
    detail = client.post(
        "/api/attention/detail", json={"model": MINILM_ID, "text": text, "layer": 3, "head": 0}
    )
    assert second.json()["cached"] is True and detail.status_code == 200
    assert len(calls) == 1


def test_concurrent_identical_requests_share_one_forward_pass(client, forward_calls):
    calls = forward_calls
    text = "Eight clients ask for the same brand new sentence at the same time."
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(post(client, text=text).status_code))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 8
    assert len(calls) == 1


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"model": "nope"}, 404, "Unknown model 'nope'. Available:"),
        ({"model": "../../etc/passwd"}, 404, "Unknown model"),
        ({"text": ""}, 422, "text is empty"),
        ({"text": "   \n\t "}, 422, "text is empty"),
        ({"text": "word " * 600}, 422, "accepts at most 512 tokens"),
        ({"text": "x" * (MAX_TEXT_CHARS + 1)}, 422, f"at most {MAX_TEXT_CHARS} characters"),
        ({"layers": [6]}, 422, "layers [6] out of range: this model has 6 (0 to 5)"),
        ({"layers": [-1]}, 422, "layers.0: Input should be greater than or equal to 0"),
        ({"heads": [12]}, 422, "heads [12] out of range"),
        ({"layers": []}, 422, "layers: List should have at least 1 item"),
        ({"heads": [True]}, 422, "heads.0: Input should be a valid integer"),
        ({"heads": ["0"]}, 422, "heads.0: Input should be a valid integer"),
        ({"head": [0]}, 422, "head: unknown field; did you mean 'heads'?"),
        ({"format": "xml"}, 422, "format"),
        ({"model": "gpt2"}, 503, "not in the local HuggingFace cache"),
    ],
)
def test_errors_are_clear(client, body, status, message):
    response = client.post("/api/attention", json={"model": MINILM_ID, "text": TEXT, **body})
    assert response.status_code == status, response.text
    assert message in response.json()["detail"]


@pytest.mark.parametrize(
    "body,message",
    [
        ({"layer": 6}, "layer [6] out of range"),
        ({"head": 12}, "head [12] out of range"),
        ({"query": 99}, "query 99 out of range: the text has"),
        ({"scale": 0}, "scale"),
        ({"temperature": -1}, "temperature"),
    ],
)
def test_detail_errors(client, body, message):
    response = client.post("/api/attention/detail", json={"model": MINILM_ID, "text": TEXT, **body})
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]


@pytest.mark.parametrize(
    "text",
    [
        "<img src=x onerror=alert(1)>",
        "emoji 👩‍👩‍👧 and ZWJ\u200d, RTL \u202eevil",
        "control \x00\x01\x07 chars",
        "combining é̃̂ and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "中文字符和日本語",
    ],
)
def test_strange_text_works_and_comes_back_as_text(client, text):
    for model in (MINILM_ID, "local/gpt2-tiny"):
        response = client.post("/api/attention", json={"model": model, "text": text, "layers": [0]})
        assert response.status_code == 200, response.text
    body = client.post("/api/attention", json={"model": "local/gpt2-tiny", "text": text}).json()
    if text.startswith("<img"):
        assert "".join(body["tokens"]).replace("␣", " ") == text


def test_lone_surrogate_is_refused(client):
    raw = '{"model": "%s", "text": "bad \\ud800 text"}' % MINILM_ID  # noqa: UP031
    response = client.post(
        "/api/attention", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert "text" in response.json()["detail"]


@pytest.mark.parametrize("model_id", [MINILM_ID, SMOLLM2_ID])
def test_detail_is_its_schema_with_float32_numbers(client, model_id):
    """The detail answer holds DetailResponse's fields in order, the mask as booleans and every
    matrix's numbers each the shortest decimal of its float32 (no float64 digits)."""
    body = {"model": model_id, "text": TEXT, "layer": 1, "head": 2, "query": 3}
    answer = assert_answer_is(DetailResponse, client.post("/api/attention/detail", json=body))
    seq = len(answer["tokens"])
    assert all(isinstance(x, bool) for row in answer["mask"] for x in row)
    for name in ("q", "scores", "weights", "counterfactual_weights", "products", "value_weighted"):
        assert len(answer[name]) == seq
        assert_float32_numbers(answer[name])


def test_load_and_status_routes(client):
    response = client.post(f"/api/models/{MINILM_ID}/load")
    assert response.status_code == 202
    status = client.get(f"/api/models/{MINILM_ID}/status").json()
    assert status["state"] in ("loading", "ready")
    assert client.get("/api/models/nope/status").status_code == 404
