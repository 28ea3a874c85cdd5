"""POST /api/attention/decoder: an encoder-decoder's decoder self-attention and cross-attention
(T5 here, a tiny random checkpoint of the suite's), equal to transformers' own, with its
refusals made before the model runs."""

import json

import pytest
import torch
import transformers as tf
from transformers.models.bart.modeling_bart import shift_tokens_right

from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.registry import build_registry
from atlas_engine.schemas.attention import MAX_JSON_WEIGHTS
from atlas_engine.schemas.seq2seq import DecoderRequest
from atlas_engine.services.passes import Passes
from atlas_engine.services.seq2seq import decoder_attention
from tests.conftest import CACHE_DIR, gpt2_tokenizer

T5 = "local/t5-tiny"
TEXT = "translate English to German: the house is wonderful"
TARGET = "das Haus ist wunderbar"
ROUTE = "/api/attention/decoder"


def post(client, status=200, **body):
    response = client.post(ROUTE, json={"model": T5, "text": TEXT, "target": TARGET, **body})
    assert response.status_code == status, response.text
    return response.json()


def test_the_decoders_and_cross_maps_are_the_models_own(client, app):
    loaded = app.state.manager.get(T5)
    whole = loaded.seq2seq
    enc = loaded.tokenizer(TEXT, return_tensors="pt")
    labels = loaded.tokenizer(text_target=TARGET, return_tensors="pt")["input_ids"]
    target = whole._shift_right(labels)  # T5's own teacher forcing: start token, labels[:-1]
    with torch.no_grad():
        out = whole(input_ids=enc["input_ids"], decoder_input_ids=target, output_attentions=True)
    for layer in range(whole.config.num_decoder_layers):
        body = post(client, layer=layer)
        assert torch.equal(torch.tensor(body["decoder"]), out.decoder_attentions[layer][0])
        assert torch.equal(torch.tensor(body["cross"]), out.cross_attentions[layer][0])
    s, t = target.shape[1], enc["input_ids"].shape[1]
    assert (len(body["target_tokens"]), len(body["tokens"])) == (s, t)
    assert body["target_tokens"][0] == loaded.tokenizer.convert_ids_to_tokens(0)  # the start
    assert torch.tensor(body["cross"]).shape == (body["num_heads"], s, t)
    decoder = torch.tensor(body["decoder"])
    assert torch.equal(decoder.triu(1), torch.zeros_like(decoder))  # the future is masked
    # The explorer's other maps of the model are its encoder's, as the whole model ran it.
    maps = client.post("/api/attention", json={"model": T5, "text": TEXT}).json()
    assert torch.equal(torch.tensor(maps["attentions"]), torch.stack(
        [a[0] for a in out.encoder_attentions]))  # fmt: skip


def test_the_model_list_says_which_models_have_a_decoder(client):
    client.post(ROUTE, json={"model": T5, "text": TEXT, "target": TARGET})
    models = {m["id"]: m for m in client.get("/api/models").json()["models"]}
    assert models[T5]["encoder_decoder"] is True
    assert models["local/gpt2-tiny"]["encoder_decoder"] is False
    assert models["sentence-transformers/all-MiniLM-L6-v2"]["encoder_decoder"] is False


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"model": "local/gpt2-tiny"}, "not an encoder-decoder"),
        ({"layer": 9}, "decoder layer"),
        ({"target": "word " * 600}, "the target is 6"),
        ({"text_pair": "a second sentence"}, "text_pair"),
        ({"target": "   "}, "target"),
    ],
)
def test_what_cannot_be_shown_is_refused_before_the_model_runs(
    client, app, monkeypatch, body, says
):
    def never(*_args, **_kwargs):
        raise AssertionError("ran before the request was checked")

    monkeypatch.setattr("atlas_engine.services.seq2seq.decoder_maps", never)
    assert says in post(client, 422, **body)["detail"]


def test_an_answer_too_large_for_json_is_refused_with_its_size(client, monkeypatch):
    monkeypatch.setattr("atlas_engine.services.seq2seq.MAX_JSON_WEIGHTS", 100)
    detail = post(client, 422)["detail"]
    assert "weights" in detail and "at most 100" in detail
    assert MAX_JSON_WEIGHTS == 4_000_000


def test_a_bart_with_its_own_names_for_the_decoders_size_is_read_too(tmp_path):
    """BART names its decoder's layers and heads decoder_layers and decoder_attention_heads
    (2 heads here, against the encoder's 4), and shifts its labels with its own function."""
    torch.manual_seed(0)
    config = tf.BartConfig(
        vocab_size=50257, d_model=32, encoder_layers=2, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64,
    )  # fmt: skip
    # Saved with its LM head, as BART checkpoints are: its final_logits_bias is a head's weight.
    tf.BartForConditionalGeneration(config).save_pretrained(tmp_path / "bart")
    gpt2_tokenizer().save_pretrained(tmp_path / "bart")
    registry = build_registry([f"local/bart={tmp_path / 'bart'}"], None)
    manager = ModelManager(registry, cache_dir=CACHE_DIR, token_limit=64, max_loaded=1)
    passes = Passes(manager, ForwardCache(4, 2**30), AnswerBudget(2**30, 1.0))
    request = DecoderRequest(model="local/bart", text=TEXT, target=TARGET, layer=2)
    answer, reservation = decoder_attention(passes, request)
    reservation.release()
    body = json.loads(answer)
    assert (body["num_layers"], body["num_heads"]) == (3, 2)
    loaded = manager.get("local/bart")
    labels = torch.tensor([loaded.tokenizer(text_target=TARGET)["input_ids"]])
    forced = shift_tokens_right(labels, config.pad_token_id, config.decoder_start_token_id)
    source = torch.tensor([loaded.tokenizer(TEXT)["input_ids"]])
    with torch.no_grad():
        out = loaded.seq2seq(input_ids=source, decoder_input_ids=forced, output_attentions=True)
    assert torch.equal(torch.tensor(body["decoder"]), out.decoder_attentions[2][0])
    assert torch.equal(torch.tensor(body["cross"]), out.cross_attentions[2][0])
    assert passes.budget.held_bytes == 0
