"""Trace a score in Chromium (issue 52): from its link on MiniLM and on SmolLM2, at 1280 and
390 px, the numbers shown are the trace API's own, axe-core finds nothing and nothing is wider
than the screen; a head piece opens that head, at the key for a key-side piece."""

import json
import urllib.request
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.e2e.helpers import wait_js
from tests.e2e.pages import MINILM

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
ANIMAL = "The animal didn't cross the street because it was too tired."
WORDS = "violet engine copper hollow maple signal drift canyon."
# 'it' (10) reads 'animal' (2) most; the second ' hollow' (14) reads the first ' maple' (6)
# through an induction head whose key side is an earlier previous-token head's output.
CASES = {
    "minilm": ({"model": MINILM, "text": ANIMAL, "layer": 3, "head": 1, "q": 10}, 2),
    "smollm2": (
        {"model": SMOLLM2, "text": f"Listen: {WORDS} {WORDS}", "layer": 18, "head": 6, "q": 14},
        6,
    ),
}
DRAWN = "document.querySelector('#trace-matrix')?.data?.length > 0"
FITS = "document.documentElement.scrollWidth <= window.innerWidth + 1"


def traced(base: str, state: dict, key: int) -> dict:
    """The trace API's answer for the view's state (the key the view chose by default)."""
    body = {"model": state["model"], "text": state["text"], "layer": state["layer"],
            "head": state["head"], "query": state["q"], "key": key, "top": 12}  # fmt: skip
    request = urllib.request.Request(
        f"{base}/api/attention/trace",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.load(answer)


def opened(browser, url: str, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900}, is_mobile=width < 500)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(page, DRAWN, 120)
    return context, page


def metric(page, name: str) -> str:
    return page.inner_text(f"#trace-metrics [data-metric='{name}'] .value")


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("case", list(CASES))
def test_a_trace_from_its_link_shows_the_apis_numbers(browser, live_server, case, width):
    state, key = CASES[case]
    context, page = opened(
        browser, f"{live_server}/?{urlencode({**state, 'view': 'trace'})}", width
    )
    answer = traced(live_server, state, key)
    assert page.input_value("#trace-key") == str(key)  # by default the key weighed most
    assert max(range(len(answer["weights"])), key=answer["weights"].__getitem__) == key
    assert metric(page, "score") == f"{answer['score']:.4f}"
    assert metric(page, "weight") == f"{answer['weight']:.4f}"
    assert metric(page, "bound") == f"{answer['bound']:.1e}".replace("e-0", "e-")
    assert page.locator("#trace-summary li").all_inner_texts() == answer["summary"]
    shown = page.evaluate("document.querySelector('#trace-matrix').data[0].z")
    flat = [v for row in answer["trace"]["matrix"] for v in row]
    assert [v for row in shown for v in row] == pytest.approx(flat, abs=1e-6)
    assert page.inner_text("#trace-pairs li >> nth=0").startswith(
        answer["trace"]["pairs"][0]["text"]
    )
    assert page.evaluate(FITS)
    assert Axe().run(page).response["violations"] == []
    page.select_option("#trace-side", "versus")
    wait_js(page, "new URLSearchParams(location.search).get('tv') === 'versus'")
    wait_js(
        page,
        f"document.querySelector('#trace-matrix').data[0].z[0][0] === {answer['versus']['matrix'][0][0]}",
    )
    assert not page.errors
    context.close()


def test_a_click_on_the_text_chooses_the_query_and_on_the_row_the_key(browser, live_server):
    state, _ = CASES["minilm"]
    url = f"{live_server}/?{urlencode({**state, 'q': 2, 'view': 'trace'})}"
    context, page = opened(browser, url, 1280)
    page.locator("#tokens .token").nth(10).click()  # 'it'
    wait_js(page, "new URLSearchParams(location.search).get('q') === '10'")
    wait_js(page, "document.querySelector('#trace-key').value === '2'", 60)  # 'animal'
    assert parse_qs(urlparse(page.url).query)["view"] == ["trace"]
    page.locator("#trace-row").scroll_into_view_if_needed()
    bar = page.locator("#trace-row .bars .point").nth(8).bounding_box()  # 'street'
    page.mouse.click(bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2)
    wait_js(page, "new URLSearchParams(location.search).get('tk') === '8'")
    wait_js(page, "document.querySelector('#trace-summary').textContent.includes(\"'street'\")", 60)
    assert not page.errors
    context.close()


def test_a_key_side_head_opens_that_head_at_the_key(browser, live_server):
    """SmolLM2's induction head: the key side's largest piece is L16 H0's output at ' maple';
    its bar opens L16 H0 with ' maple' as the query, and the key it reads most is traced."""
    state, key = CASES["smollm2"]
    url = f"{live_server}/?{urlencode({**state, 'tk': key, 'view': 'trace'})}"
    context, page = opened(browser, url, 1280)
    labels = page.evaluate("document.querySelector('#trace-key-side').data[0].y")
    assert labels[-1] == "L16 H0"  # the largest, drawn at the top
    page.locator("#trace-key-side").scroll_into_view_if_needed()
    bar = page.locator("#trace-key-side .bars .point").last.bounding_box()  # a click, as a user's
    page.mouse.click(bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2)
    wait_js(page, "new URLSearchParams(location.search).get('layer') === '16'")
    query = parse_qs(urlparse(page.url).query)
    assert query["head"] == ["0"] and query["q"] == [str(key)] and "tk" not in query
    wait_js(
        page, "document.querySelector('#trace-summary').textContent.includes('Layer 16 head 0')", 60
    )
    answer = traced(live_server, {**state, "layer": 16, "head": 0, "q": key}, key)
    strongest = max(range(len(answer["weights"])), key=answer["weights"].__getitem__)
    assert page.input_value("#trace-key") == str(strongest) == "5"  # ' hollow', the token before
    assert not page.errors
    context.close()
