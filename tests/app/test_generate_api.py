"""POST /api/attention/generate. Known by construction: greedy continuation is transformers' own
greedy generate(); each token's probability is the full model's; the maps of the answer's text
are the attention the generation computed step by step with its key/value cache."""

import pytest
import torch

from atlas_engine.inference.generate import next_token
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.generate import MIN_SAMPLE_TEMPERATURE
from tests.support.ndjson import checked_lines

pytestmark = pytest.mark.slow
PROMPT = "The capital of France is Paris. The capital of Italy is"


def generate(client, **body) -> tuple[list[dict], dict]:
    response = client.post("/api/attention/generate", json={"text": PROMPT, **body})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = checked_lines(client, "/api/attention/generate", response)
    assert [line["event"] for line in lines] == ["token"] * (len(lines) - 1) + ["done"]
    return lines[:-1], lines[-1]


@pytest.mark.parametrize("model_id", ["local/gpt2-tiny", SMOLLM2_ID])
def test_greedy_is_transformers_greedy_and_the_maps_are_the_generations_own(client, app, model_id):
    tokens, done = generate(client, model=model_id, max_new_tokens=12)
    loaded = app.state.manager.get(model_id)
    prompt = loaded.tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = loaded.predictor.generate(
            prompt, max_new_tokens=12, do_sample=False, output_attentions=True,
            return_dict_in_generate=True, pad_token_id=loaded.tokenizer.eos_token_id,
        )  # fmt: skip
    expected = out.sequences[0, prompt.shape[1] :].tolist()
    assert [t["token_id"] for t in tokens] == expected
    assert done["prompt_tokens"] == prompt.shape[1] and done["generated"] == 12
    assert {t["prompt_tokens"] for t in tokens} == {prompt.shape[1]}
    assert done["stopped"] == "length" and done["exact"]
    assert done["text"] == PROMPT + tokens[-1]["continuation"]
    ids = out.sequences[:, :-1]  # the last token was chosen, never read
    with torch.no_grad():
        logits = loaded.predictor(out.sequences).logits[0].float()
    for t in tokens:  # its probability where it was chosen, by the full model
        row = prompt.shape[1] - 1 + t["index"]
        assert t["probability"] == pytest.approx(
            float(logits[row].softmax(-1)[t["token_id"]]), abs=1e-4
        )
    maps = client.post(
        "/api/attention", json={"model": model_id, "text": done["text"], "format": "json"}
    ).json()["attentions"]
    for step, layers in enumerate(out.attentions[1:], start=1):  # step s reads token s-1
        query = prompt.shape[1] + step - 1
        for layer in (0, len(layers) - 1):
            generated = layers[layer][0, :, -1, : query + 1]  # (H, query + 1)
            shown = torch.tensor(maps[layer])[:, query, : query + 1]
            torch.testing.assert_close(shown, generated.float(), atol=2e-5, rtol=0)
    assert ids.shape[1] == len(torch.tensor(maps[0][0])) - 1


def test_sampling_is_seeded_and_top_k_one_is_greedy(client):
    body = {"model": SMOLLM2_ID, "max_new_tokens": 10, "strategy": "sample", "temperature": 1.5}
    first, _ = generate(client, **body, seed=1)
    again, _ = generate(client, **body, seed=1)
    other, _ = generate(client, **body, seed=2)
    ids = lambda lines: [t["token_id"] for t in lines]  # noqa: E731
    assert ids(first) == ids(again) and ids(first) != ids(other)
    greedy, _ = generate(client, model=SMOLLM2_ID, max_new_tokens=10)
    narrow, _ = generate(client, **body, top_k=1, seed=3)
    assert ids(narrow) == ids(greedy)


def test_the_smallest_temperature_samples_the_greedy_token():
    """At the schema's lowest temperature logits / temperature stay finite and the draw is the
    most likely token, top-k or not. A temperature of 2e-313 (accepted before) made them
    infinite, softmax NaN, and broke the stream."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.tensor([3.0e4, -2.0e4, 2.99e4, 0.0])  # float32, as the model's
    assert torch.isnan((logits / 2.2250738585e-313).softmax(-1)).all()
    for top_k in (None, 2):
        chosen = next_token(logits, "sample", MIN_SAMPLE_TEMPERATURE, top_k, generator)
        assert chosen == 0


def test_refusals_say_why(client):
    response = client.post("/api/attention/generate", json={"model": MINILM_ID, "text": PROMPT})
    assert response.status_code == 422 and "not a causal decoder" in response.text
    long = "word " * 500
    response = client.post(
        "/api/attention/generate",
        json={"model": SMOLLM2_ID, "text": long, "max_new_tokens": 100},
    )
    assert response.status_code == 422 and "new tokens fit" in response.text
    for temperature in (2.2250738585e-313, MIN_SAMPLE_TEMPERATURE / 10, 0, 101):
        body = {"model": SMOLLM2_ID, "text": PROMPT, "strategy": "sample"}
        response = client.post("/api/attention/generate", json=body | {"temperature": temperature})
        assert response.status_code == 422 and "temperature" in response.text
