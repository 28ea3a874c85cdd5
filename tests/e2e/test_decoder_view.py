"""Decoder & cross in Chromium: a T5 checkpoint (tiny, random, made here and served as an
operator's folder) shows its decoder's self-attention and its cross-attention from a link, at
1280 and 390 px, with the target and decoder layer in the URL; a model with one stack says so
and offers the T5."""

import json
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
import torch
import transformers as tf

from tests.conftest import gpt2_tokenizer
from tests.e2e.helpers import wait_js
from tests.e2e.pages import MINILM
from tests.support.live import start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

T5 = "local/t5"
TEXT = "translate English to German: the house is wonderful"
TARGET = "das Haus ist wunderbar"
DRAWN = "document.querySelector('#decoder-cross')?.data?.length > 0"


@pytest.fixture(scope="module")
def t5_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("t5")
    torch.manual_seed(0)
    config = tf.T5Config(
        vocab_size=50257, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3,
        num_heads=4, decoder_start_token_id=0,
    )  # fmt: skip
    tf.T5ForConditionalGeneration(config).save_pretrained(folder)
    gpt2_tokenizer().save_pretrained(folder)
    env = {"ATLAS_EXTRA_MODELS": json.dumps([f"{T5}={folder}"])}
    server = start_server(folder / "server.log", env=env)
    yield server.base
    server.stop()


@pytest.mark.parametrize("width", [1280, 390])
def test_a_t5_opens_its_decoder_and_cross_attention_from_a_link(browser, t5_server, width):
    state = {"model": T5, "text": TEXT, "layer": 0, "head": 1, "view": "decoder"}
    url = f"{t5_server}/?{urlencode({**state, 'tg': TARGET, 'dl': 2})}"
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    wait_js(page, DRAWN, 120)
    assert page.inner_text("#decoder-summary").startswith("Decoder layer 2 of 3, head 1.")
    cross = page.evaluate("document.querySelector('#decoder-cross').data[0]")
    decoder = page.evaluate("document.querySelector('#decoder-self').data[0]")
    assert len(cross["y"]) == len(decoder["y"]) == len(decoder["x"])  # the target's tokens
    assert len(cross["x"]) != len(cross["y"])  # the input's tokens across
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.fill("#decoder-layer", "1")
    page.press("#decoder-layer", "Enter")
    page.locator("#decoder-layer").blur()
    wait_js(page, "new URLSearchParams(location.search).get('dl') === '1'")
    wait_js(
        page, "document.querySelector('#decoder-summary').textContent.startsWith('Decoder layer 1')"
    )
    assert parse_qs(urlparse(page.url).query)["tg"] == [TARGET]
    assert not errors
    context.close()


def test_a_model_with_one_stack_says_so_and_offers_the_t5(browser, t5_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{t5_server}/?{urlencode({'model': MINILM, 'view': 'decoder'})}")
    wait_js(page, "document.querySelector('#decoder-summary').textContent.length > 0", 120)
    assert "is not an encoder–decoder" in page.inner_text("#decoder-summary")
    assert page.is_hidden("#decoder-results") and page.is_hidden("#decoder-target")
    page.click("#decoder-summary button")
    wait_js(page, DRAWN, 120)
    assert parse_qs(urlparse(page.url).query)["model"] == [T5]
    context.close()
