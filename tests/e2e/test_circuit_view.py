"""The Circuit view in Chromium (issue 52.5): SmolLM2's induction circuit on a repeated text
drawn from its link at 1280 and 390 px, the numbers shown being the API's, the threshold and
inputs in the URL, a click on a head opening it; edge patching on the name-swap pair; and
MiniLM, which has no language-model head, saying why it has no edge patching."""

import json
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from tests.e2e.helpers import export, wait_js
from tests.e2e.pages import MINILM, SENTENCE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
REPEATED = (
    "Listen: violet engine copper hollow maple signal drift canyon. violet engine copper hollow "
    "maple signal drift canyon."
)
DRAWN = "document.querySelector('#circuit-graph')?.data?.length > 0"


def opened(browser, url: str, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    page.goto(url)
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(page, DRAWN, 120)
    return context, page


@pytest.mark.parametrize("width", [1280, 390])
def test_the_induction_circuit_from_its_link(browser, live_server, width):
    state = {"model": SMOLLM2, "text": REPEATED, "layer": 18, "head": 6, "view": "circuit",
             "cin": "k", "cmin": "0.3"}  # fmt: skip
    context, page = opened(browser, f"{live_server}/?{urlencode(state)}", width)
    api = page.request.post(
        f"{live_server}/api/attention/circuit",
        data={"model": SMOLLM2, "text": REPEATED, "by": "text", "inputs": ["k"], "top": 400},
    ).json()
    first = api["edges"][0]
    assert (first["from_layer"], first["from_head"]) == (16, 0)  # the previous-token head
    cards = page.inner_text("#circuit-metrics")
    assert f"L16 H0 → L{first['to_layer']} H{first['to_head']}.k" in cards
    shown = [e for e in api["edges"] if abs(e["value"]) >= 0.3 * api["largest"]]
    assert f"{len(shown)} of {api['edge_count']}" in cards
    assert page.locator("#circuit-list li").count() == min(12, len(shown))
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.select_option("#circuit-inputs", "q")
    wait_js(page, "new URLSearchParams(location.search).get('cin') === 'q'")
    wait_js(page, "document.querySelector('#circuit-metrics').textContent.includes('.q')", 60)
    nodes = "document.querySelector('#circuit-graph').data.find(t => t.name === 'heads')"
    index = page.evaluate(f"{nodes}.x.findIndex((x, i) => x === 16 && {nodes}.y[i] === 0)")
    page.evaluate(
        "(i) => document.querySelector('#circuit-graph').emit('plotly_click', {points: [{data: "
        f"{nodes}, x: {nodes}.x[i], y: {nodes}.y[i]}}]}})",
        index,
    )
    wait_js(page, "new URLSearchParams(location.search).get('view') === 'heatmap'")
    query = parse_qs(urlparse(page.url).query)
    assert query["layer"] == ["16"] and query["head"] == ["0"]
    assert not page.errors
    context.close()


def test_edge_patching_on_the_name_swap(browser, live_server):
    state = {
        "model": SMOLLM2,
        "text": "x",
        "layer": 0,
        "head": 0,
        "view": "circuit",
        "cby": "edges",
    }
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{live_server}/?{urlencode(state)}")
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(
        page, "document.querySelector('#circuit-summary').textContent.includes('corrupted text')"
    )
    page.click("#circuit-example")
    wait_js(page, DRAWN, 120)
    query = parse_qs(urlparse(page.url).query)
    assert query["ccor"] == ["When Mary and John went to the store, Mary gave a drink to"]
    assert "logit(␣Mary) − logit(␣John)" in page.inner_text("#circuit-summary")
    context.close()


def test_minilm_has_no_edge_patching_and_says_why(page, live_server):
    state = {"model": MINILM, "text": SENTENCE, "view": "circuit", "cby": "edges", "ccor": SENTENCE}
    page.goto(f"{live_server}/?{urlencode(state)}")
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(
        page,
        "document.querySelector('#circuit-summary').textContent.includes('no language-model head')",
    )


def test_composition_from_the_weights(browser, live_server):
    state = {"model": SMOLLM2, "text": REPEATED, "layer": 18, "head": 6, "view": "circuit",
             "cby": "weights", "cin": "k"}  # fmt: skip
    context, page = opened(browser, f"{live_server}/?{urlencode(state)}", 1280)
    assert "composition score from the weights" in page.inner_text("#circuit-summary")
    assert "L17 H8 → L18" in page.inner_text("#circuit-metrics")  # K-composition's strongest
    assert page.input_value("#circuit-by") == "weights"
    heads = page.evaluate(  # every edge ends at a query head on the plot (none past head 8)
        "Math.max(...document.querySelector('#circuit-graph').data.filter(t => t.mode === "
        "'lines').flatMap(t => t.y.filter(y => y !== null)))"
    )
    assert heads <= 8.2
    edges = "document.querySelector('#circuit-graph').data.find(t => t.name === 'edges')"
    page.evaluate(
        "document.querySelector('#circuit-graph').emit('plotly_click', {points: [{data: "
        f"{edges}, customdata: 0}}]}})"
    )
    wait_js(page, "new URLSearchParams(location.search).get('view') === 'trace'")
    query = parse_qs(urlparse(page.url).query)
    assert query["layer"] == ["18"]  # the strongest edge's later head, its trace opened
    assert not page.errors
    context.close()


def test_the_first_composition_says_how_far_it_has_come(browser, live_server):
    """While the circuit from the weights waits (held here, the scores being computed), its
    wait line shows the stage and the share GET /api/models/{id}/composition reports, with a
    progress bar; once drawn the line is hidden and back to its words."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    held = []
    computing = {"model": MINILM, "state": "computing",
                 "stage": "scoring every pair of heads", "fraction": 0.55}  # fmt: skip
    page.route("**/api/models/**/composition", lambda route: route.fulfill(json=computing))
    page.route("**/api/attention/circuit", lambda route: held.append(route))
    state = {"model": MINILM, "text": SENTENCE, "view": "circuit", "cby": "weights"}
    page.goto(f"{live_server}/?{urlencode(state)}")
    wait_js(page, "document.querySelector('#view-busy-text').textContent.includes('55 %')", 120)
    line = page.inner_text("#view-busy")
    assert "Scoring every pair of heads from the weights, once for this model" in line
    assert page.eval_on_selector("#view-busy-progress", "p => !p.hidden && p.value") == 0.55
    held[0].continue_()
    wait_js(page, DRAWN, 120)
    assert page.locator("#view-busy").is_hidden()
    assert page.inner_text("#view-busy-text") == "Computing this view…"
    assert page.locator("#view-busy-progress").is_hidden()
    context.close()


def test_the_circuit_exports_the_edges_it_draws(page, live_server):
    """JSON and CSV hold exactly the edges drawn (above the threshold), as the API gave them."""
    state = {"model": MINILM, "text": SENTENCE, "layer": 3, "head": 1, "view": "circuit",
             "cmin": "0.25"}  # fmt: skip
    page.goto(f"{live_server}/?{urlencode(state)}")
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(page, DRAWN, 120)
    api = page.request.post(
        f"{live_server}/api/attention/circuit",
        data={
            "model": MINILM,
            "text": SENTENCE,
            "by": "text",
            "inputs": ["q", "k", "v"],
            "top": 400,
        },
    ).json()
    largest = max(1e-12, api["largest"])
    drawn = [e for e in api["edges"] if abs(e["value"]) >= 0.25 * largest]
    name, body = export(page, "json")
    assert "circuit-text" in name
    data = json.loads(body)
    rows = data["edges"]  # the edges drawn; every edge found is in data["answer"]
    assert len(rows) == len(drawn) > 0 and data["answer"]["edges"] == api["edges"]
    for row, edge in zip(rows, drawn, strict=True):
        assert row[:5] == [edge["from_layer"], edge["from_head"], edge["to_layer"],
                           edge["to_head"], "qkv".index(edge["input"])]  # fmt: skip
        assert abs(row[5] - edge["value"]) < 1e-6
    name, body = export(page, "csv")
    assert name.endswith(".csv") and len(body.decode().strip().splitlines()) == len(drawn) + 1
