"""Issue 9.9: what a page shows comes back from its URL, and a link that asks for something
this server cannot show says what it changed."""

from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from tests.e2e.helpers import click_view, wait_js
from tests.e2e.pages import MINILM, SENTENCE, open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def reopen(browser, page):
    """The page's current URL (as history.replaceState left it) opened in a new tab."""
    other = browser.new_page()
    other.goto(page.evaluate("location.href"))
    return other


def test_overlay_heads_threshold_and_what_if_settings_survive_a_reload(page, live_server, browser):
    open_view(page, live_server, "explorer:lines")
    page.check("#lines-heads input[value='3']")
    page.check("#lines-heads input[value='7']")
    page.eval_on_selector(
        "#lines-threshold",
        "el => { el.value = '0.2'; el.dispatchEvent(new Event('input', {bubbles: true})); }",
    )
    wait_js(page, "new URLSearchParams(location.search).get('min') === '0.2'")
    params = parse_qs(urlparse(page.url).query)
    assert params["heads"] == ["0,3,7"]
    other = reopen(browser, page)
    other.wait_for_selector("#view-lines:not([hidden])", timeout=60_000)
    wait_js(other, "document.querySelectorAll('#lines-heads input:checked').length === 3")
    assert other.input_value("#lines-threshold") == "0.2"
    lines = other.evaluate("[...document.querySelectorAll('#lines line')].map(l => +l.dataset.q)")
    assert lines  # drawn from the shared heads
    other.close()

    click_view(page, "whatif")
    page.uncheck("#whatif-unscaled")
    page.eval_on_selector(
        "#whatif-temperature",
        "el => { el.value = '0.5'; el.dispatchEvent(new Event('input', {bubbles: true})); }",
    )
    wait_js(page, "new URLSearchParams(location.search).get('temp') === '3.1623'")
    other = reopen(browser, page)
    wait_js(other, "document.querySelector('#whatif-counterfactual').data.length > 0", 60)
    assert not other.is_checked("#whatif-unscaled")
    assert other.inner_text("#whatif-temperature-value") == "3.16"
    assert "temperature 3.16" in other.evaluate(
        "document.querySelector('#whatif-counterfactual').layout.title.text"
    )
    other.close()


def test_lab_inputs_survive_a_reload(page, live_server, browser):
    page.goto(f"{live_server}/lab/masks")
    page.wait_for_selector("#masks-grid figure")
    page.fill("#masks-window", "3")
    page.fill("#masks-text", "one two three four five six")
    page.click("#masks-form button[type=submit]")
    other = reopen(browser, page)
    other.wait_for_selector("#masks-grid figure")
    assert other.input_value("#masks-window") == "3"
    assert other.input_value("#masks-text") == "one two three four five six"
    assert other.locator("#masks-grid figure").count() == page.locator("#masks-grid figure").count()
    other.close()

    page.goto(f"{live_server}/lab/step-by-step")
    page.wait_for_selector("#stage-grid figure .js-plotly-plot")
    page.select_option("#mask", "causal")
    page.fill("#tokens", "A B C")
    other = reopen(browser, page)
    assert other.input_value("#mask") == "causal" and other.input_value("#tokens") == "A B C"
    other.close()

    page.goto(f"{live_server}/lab/scaling")
    page.wait_for_selector("[data-metric='entropy-unscaled']")
    page.fill("#seed", "7")
    other = reopen(browser, page)
    assert other.input_value("#seed") == "7"
    other.close()


def test_a_link_to_an_unknown_model_or_layer_says_what_changed(page, live_server):
    page.goto(f"{live_server}/?{urlencode({'model': 'nobody/nothing', 'text': SENTENCE})}")
    page.wait_for_selector("#result:not([hidden])", timeout=60_000)
    assert "nobody/nothing" in page.inner_text("#run-notice") and MINILM in page.inner_text(
        "#run-notice"
    )
    assert page.input_value("#model") == MINILM
    page.goto(
        f"{live_server}/?{urlencode({'model': MINILM, 'text': SENTENCE, 'layer': 40, 'head': 2})}"
    )
    page.wait_for_selector("#result:not([hidden])", timeout=60_000)
    wait_js(page, "!document.querySelector('#run-notice').hidden")
    assert "no layer 40" in page.inner_text("#run-notice") and "showing layer 5" in page.inner_text(
        "#run-notice"
    )
    assert page.input_value("#layer") == "5" and page.inner_text("#run-error") == ""
