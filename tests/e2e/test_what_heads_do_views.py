"""Issue 13's explorer views: Compare, Q-K space and generation, driven as a user would.
(Named to sort after test_explorer.py, which must see SmolLM2 load.)"""

import json
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from tests.e2e.helpers import wait_js

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def url_state(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_compare_two_inputs_from_a_shared_link(page, live_server):
    query = {"model": MINILM, "text": "The cat sat on the mat.", "layer": 2, "head": 3,
             "view": "compare", "cmp": "2.3", "cmptext": "The dog sat on the mat."}  # fmt: skip
    page.goto(f"{live_server}/?{urlencode(query)}")
    wait_js(page, "document.querySelector('#compare-difference').data?.length > 0", 120)
    assert "1 position(s) hold different tokens" in page.text_content("#compare-alignment")
    assert "2 “cat” → “dog”" in page.text_content("#compare-metrics")
    a, b, diff = page.evaluate(
        "['#compare-a', '#compare-b', '#compare-difference'].map(s => document.querySelector(s).data[0].z)"
    )
    rows = zip(a, b, diff, strict=True)
    worst = max(abs(d - (y - x)) for ra, rb, rd in rows for x, y, d in zip(ra, rb, rd, strict=True))
    assert worst < 1e-6
    assert page.input_value("#compare-text") == "The dog sat on the mat."
    with page.expect_download() as info:
        page.click("[data-export='json']")
    with open(info.value.path(), "rb") as saved:
        exported = json.loads(saved.read())
    assert exported["difference"] == diff and exported["b"]["text"] == "The dog sat on the mat."
    page.select_option("#compare-layer", "4")
    wait_js(page, "new URL(location).searchParams.get('cmp') === '4.3'", 30)
    wait_js(
        page, "document.querySelector('#compare-b .gtitle')?.textContent.includes('layer 4')", 60
    )
    assert page.errors == []


def test_compare_two_models_says_why_there_is_no_difference(page, live_server):
    query = {"model": MINILM, "text": "Tokenisers disagree here.", "view": "compare",
             "cmpmodel": SMOLLM2, "cmp": "0.0"}  # fmt: skip
    page.goto(f"{live_server}/?{urlencode(query)}")
    wait_js(page, "document.querySelector('#compare-b').data?.length > 0", 120)
    assert "tokenisers" in page.text_content("#compare-alignment") or "tokens" in page.text_content(
        "#compare-alignment"
    )
    assert page.is_hidden("#compare-difference")
    assert page.input_value("#compare-model") == SMOLLM2


def test_query_key_space_hover_draws_the_strongest_keys_and_a_layer_opens_a_head(page, live_server):
    query = {"model": MINILM, "text": "The cat sat on the mat because it was warm.", "layer": 2,
             "head": 3, "view": "qkspace"}  # fmt: skip
    page.goto(f"{live_server}/?{urlencode(query)}")
    wait_js(page, "document.querySelector('#qkspace-plot').data?.length === 2", 120)
    plot = page.locator("#qkspace-plot")
    plot.scroll_into_view_if_needed()
    point = page.locator("#qkspace-plot .scatterlayer .trace:first-child .point").nth(4)
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    wait_js(page, "(document.querySelector('#qkspace-plot').layout.shapes || []).length === 3", 10)
    with page.expect_download() as info:
        page.click("[data-export='csv']")
    with open(info.value.path(), encoding="utf-8") as saved:
        lines = saved.read().splitlines()
    assert lines[0].split(",")[1:] == ["query x", "query y", "key x", "key y"]
    assert len(lines) == 1 + page.locator("#tokens .token").count()
    page.select_option("#qkspace-scope", "layer")
    wait_js(page, "document.querySelector('#qkspace-plot').data?.length === 24", 60)
    assert url_state(page)["qks"] == "layer"
    page.locator("#qkspace-plot .scatterlayer .trace").nth(10).locator(".point").first.click(
        force=True
    )
    wait_js(page, "new URL(location).searchParams.get('head') === '5'", 30)
    wait_js(page, "document.querySelector('#qkspace-plot').data?.length === 2", 60)
    assert "qks" not in url_state(page)
    assert page.errors == []


def test_generation_streams_then_marks_the_generated_tokens_in_every_view(page, live_server):
    page.goto(f"{live_server}/?{urlencode({'model': SMOLLM2})}")
    wait_js(page, "!document.querySelector('#generate').hidden", 60)
    page.fill("#text", "The capital of France is Paris. The capital of Italy is")
    page.fill("#generate-count", "8")
    page.click("#generate-run")
    wait_js(page, "new URL(location).searchParams.has('gen')", 120)
    wait_js(page, "document.querySelectorAll('#tokens .token.generated').length > 0", 120)
    wait_js(page, "document.querySelector('#view-heatmap .js-plotly-plot')?.data?.length > 0", 60)
    state = url_state(page)
    prompt_tokens = int(state["gen"])
    chips = page.locator("#tokens .token")
    generated = page.locator("#tokens .token.generated")
    assert generated.count() == 8 and chips.count() == prompt_tokens + 8
    assert state["text"].startswith("The capital of France is Paris. The capital of Italy is")
    assert page.input_value("#text") == state["text"]
    assert "8 generated" in page.text_content("#run-status")
    shapes = page.evaluate("document.querySelector('#view-heatmap .js-plotly-plot').layout.shapes")
    assert [s["x0"] for s in shapes if s["xref"] == "x"] == [prompt_tokens - 0.5]
    page.reload()  # the link alone brings the marks back
    wait_js(page, "document.querySelectorAll('#tokens .token.generated').length === 8", 120)
    assert page.errors == []


def test_stopping_a_generation_keeps_and_marks_what_came_so_far(page, live_server):
    prompt = "Once upon a time, in a small village by the sea,"
    page.goto(f"{live_server}/?{urlencode({'model': SMOLLM2})}")
    wait_js(page, "!document.querySelector('#generate').hidden", 60)
    page.fill("#text", prompt)
    page.fill("#generate-count", "100")
    page.click("#generate-run")
    wait_js(
        page, "/Generating: [2-9]/.test(document.querySelector('#run-status').textContent)", 120
    )
    page.click("#generate-run")  # Stop
    wait_js(page, "new URL(location).searchParams.has('gen')", 60)
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    notice = page.text_content("#run-notice")
    kept = int(notice.split("Stopped after ")[1].split(" ")[0])
    assert 2 <= kept < 100 and "they are kept" in notice
    state = url_state(page)
    assert state["text"].startswith(prompt) and len(state["text"]) > len(prompt)
    assert page.input_value("#text") == state["text"]
    chips = page.locator("#tokens .token")
    wait_js(page, f"document.querySelectorAll('#tokens .token').length > {int(state['gen'])}", 60)
    # The kept text tokenises back into the prompt and the kept tokens (or within one of them).
    assert abs(chips.count() - (int(state["gen"]) + kept)) <= 1
    assert page.locator("#tokens .token.generated").count() == chips.count() - int(state["gen"])
    assert page.inner_text("#run-error") == "" and page.errors == []
