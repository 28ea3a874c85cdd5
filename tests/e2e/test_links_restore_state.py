"""Issue 51.4: every page that keeps its state in its URL shows the same thing from that URL in
a fresh browser (no storage, no history): the explorer, Deep zoom, a head's page, the scatter
of every head and a lab page. The state is set through the controls, as a user sets it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from tests.e2e.helpers import click_view, wait_js
from tests.e2e.pages import MINILM, SENTENCE, open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ZOOM_DRAWN = "document.querySelector('#zoom-window').textContent.startsWith('Layer')"


@pytest.fixture
def fresh(browser):
    """Opens a URL in a new browser context: nothing carried over but the URL."""
    contexts = []

    def open_url(url):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        contexts.append(context)
        other = context.new_page()
        other.errors = []
        other.on("pageerror", lambda e: other.errors.append(str(e)))
        other.goto(url)
        return other

    yield open_url
    for context in contexts:
        context.close()


def values(page, selectors):
    return {s: page.input_value(s) for s in selectors}


def test_the_explorer_reopens_on_its_view_layer_and_head(page, live_server, fresh):
    open_view(page, live_server, "explorer:heatmap")
    page.select_option("#layer", "2")
    page.select_option("#head", "5")
    click_view(page, "lines")
    wait_js(page, "new URLSearchParams(location.search).get('view') === 'lines'")
    other = fresh(page.url)
    other.wait_for_selector("#result:not([hidden])", timeout=90_000)
    other.wait_for_selector("#view-lines:not([hidden])", timeout=60_000)
    assert values(other, ["#layer", "#head", "#text"]) == {
        "#layer": "2", "#head": "5", "#text": SENTENCE,
    }  # fmt: skip
    assert other.is_hidden("#view-heatmap")


def test_a_token_chosen_opens_a_view_about_it_and_reopens_there(page, live_server, fresh):
    """A click on a token from a view about no one token opens the first that is (the
    registry's rows say which), and the link keeps the token."""
    open_view(page, live_server, "explorer:heatmap")
    page.locator("#tokens .token").nth(3).click()
    wait_js(page, "new URLSearchParams(location.search).get('q') === '3'")
    assert parse_qs(urlparse(page.url).query)["view"] == ["follow"]
    other = fresh(page.url)
    other.wait_for_selector("#view-follow:not([hidden])", timeout=90_000)
    wait_js(other, "document.querySelector('#tokens [data-index=\"3\"]')?.ariaPressed === 'true'")


def test_deep_zoom_reopens_on_its_head_settings_and_search(page, live_server, fresh):
    page.goto(f"{live_server}/zoom?model={MINILM}#text={SENTENCE.replace(' ', '+')}")
    wait_js(page, ZOOM_DRAWN, 120)
    page.select_option("#zoom-layer", "3")
    page.select_option("#zoom-head", "4")
    page.select_option("#zoom-reduce", "mean")
    page.select_option("#zoom-colours", "log")
    page.fill("#zoom-find", "street")
    page.click("#zoom-find-form button[type=submit]")
    wait_js(page, "location.hash.includes('find=street') && location.search.includes('head=4')")
    shown = ["#zoom-layer", "#zoom-head", "#zoom-reduce", "#zoom-colours", "#zoom-find"]
    before = values(page, [*shown, "#zoom-text", "#zoom-model"])
    other = fresh(page.url)
    wait_js(other, ZOOM_DRAWN, 120)
    assert values(other, [*shown, "#zoom-text", "#zoom-model"]) == before
    assert before["#zoom-text"] == SENTENCE and before["#zoom-layer"] == "3"
    assert other.inner_text("#zoom-window").startswith("Layer 3")
    assert not other.errors


def test_a_heads_page_reopens_on_its_statistic_and_text(page, corpus_server, fresh):
    page.goto(f"{corpus_server}/head/{MINILM}/1/2")
    texts = "document.querySelectorAll('#head-texts .js-plotly-plot').length >= 6"
    wait_js(page, texts, 60)  # the page's last picture: its form is wired next
    page.select_option("#head-metric", "previous")
    wait_js(page, "location.search.includes('metric=previous')")
    wait_js(page, texts, 60)
    page.fill("#head-text", "The cat sat on the mat.")
    page.click("#head-compare button")
    verdict = "document.querySelector('#head-verdict').textContent.startsWith('On your text')"
    wait_js(page, verdict, 60)
    other = fresh(page.url)
    wait_js(other, verdict, 60)
    assert not other.errors
    assert values(other, ["#head-metric", "#head-text"]) == {
        "#head-metric": "previous", "#head-text": "The cat sat on the mat.",
    }  # fmt: skip
    assert other.inner_text("#head-verdict") == page.inner_text("#head-verdict")


def test_the_scatter_of_every_head_reopens_on_its_axes_and_finder(page, corpus_server, fresh):
    page.goto(f"{corpus_server}/heads/{MINILM}")
    drawn = "document.querySelector('#heads-scatter')?.data?.length > 0"
    wait_js(page, drawn, 60)
    page.select_option("#heads-x", "entropy")
    page.select_option("#heads-y", "previous")
    page.select_option("#heads-find-stat", "previous")
    page.fill("#heads-find-min", "0.2")
    page.dispatch_event("#heads-find-min", "change")
    wait_js(page, "new URLSearchParams(location.search).get('min') === '0.2'")
    controls = ["#heads-x", "#heads-y", "#heads-colour", "#heads-find-stat", "#heads-find-min"]
    before = values(page, controls)
    other = fresh(page.url)
    wait_js(other, drawn, 60)
    assert values(other, controls) == before
    title = "document.querySelector('#heads-scatter').layout.title.text"
    assert other.evaluate(title) == page.evaluate(title)


def test_a_lab_page_reopens_on_its_inputs(page, live_server, fresh):
    page.goto(f"{live_server}/lab/masks")
    page.wait_for_selector("#masks-grid figure")
    page.fill("#masks-window", "3")
    page.fill("#masks-text", "one two three four five six")
    page.click("#masks-form button[type=submit]")
    wait_js(page, "new URLSearchParams(location.search).get('window') !== null")
    other = fresh(page.url)
    other.wait_for_selector("#masks-grid figure")
    assert values(other, ["#masks-window", "#masks-text"]) == {
        "#masks-window": "3", "#masks-text": "one two three four five six",
    }  # fmt: skip
    assert other.locator("#masks-grid figure").count() == page.locator("#masks-grid figure").count()
