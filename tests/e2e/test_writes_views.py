"""What heads write, in Chromium on SmolLM2 (issue 40): the logit lens, direct attribution and
patching (the estimate, then exact patching beside it), each from its link, at 1280 and 390 px,
with state in the URL; and MiniLM, which has no head, saying so and offering SmolLM2."""

from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from tests.e2e.helpers import wait_js
from tests.e2e.pages import MINILM, settle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
CLEAN, CORRUPTED = "The capital of France is", "The capital of Italy is"


def opened(browser, url: str, width: int = 1280):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    page.goto(url)
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    return context, page


@pytest.mark.parametrize("width", [1280, 390])
def test_the_lens_and_direct_attribution_from_their_links(browser, live_server, width):
    state = {"model": SMOLLM2, "text": CLEAN, "layer": 0, "head": 0}
    context, page = opened(browser, f"{live_server}/?{urlencode({**state, 'view': 'lens'})}", width)
    wait_js(page, "document.querySelector('#lens-plot')?.data?.length > 0", 60)
    assert page.inner_text("#lens-summary").startswith("␣Paris at the last position")
    assert page.locator("#lens-cell tbody tr").count() == 5
    fits = "document.documentElement.scrollWidth <= window.innerWidth + 1"
    assert page.evaluate(fits)
    page.goto(f"{live_server}/?{urlencode({**state, 'view': 'attribution', 'dc': '␣Rome'})}")
    wait_js(page, "document.querySelector('#attribution-source')?.data?.length > 0", 60)
    summary = page.inner_text("#attribution-summary")
    assert "logit(␣Paris) − logit(␣Rome)" in summary
    assert page.evaluate(fits)
    page.locator("#attribution-candidates button", has_text="␣Paris").first.click()
    wait_js(page, "new URLSearchParams(location.search).get('dt') === '␣Paris'")
    assert not page.errors
    context.close()


def test_patching_the_estimate_then_exact_beside_it(browser, live_server):
    state = {"model": SMOLLM2, "text": CLEAN, "layer": 0, "head": 0, "view": "patching"}
    context, page = opened(browser, f"{live_server}/?{urlencode({**state, 'pc': CORRUPTED})}")
    wait_js(page, "document.querySelector('#patching-approx-heads')?.data?.length > 0", 60)
    assert "logit(␣Paris) − logit(␣Rome)" in page.inner_text("#patching-summary")
    assert page.is_hidden("#patching-exact-heads")
    page.click("#patching-exact")
    wait_js(page, "document.querySelector('#patching-exact-heads')?.data?.length > 0", 240)
    assert parse_qs(urlparse(page.url).query)["px"] == ["1"]
    assert page.inner_text("#patching-progress-text").startswith("exact patching:")
    settle(page)
    assert not page.errors
    context.close()


def test_a_model_without_a_head_says_so_and_offers_one(page, live_server):
    page.goto(
        f"{live_server}/?{urlencode({'model': MINILM, 'text': CLEAN, 'view': 'attribution'})}"
    )
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(
        page,
        "document.querySelector('#attribution-summary').textContent.includes('no language-model head')",
    )
    page.get_by_role("button", name=f"Switch to {SMOLLM2}").click()
    wait_js(page, "document.querySelector('#attribution-heads')?.data?.length > 0", 120)
    assert parse_qs(urlparse(page.url).query)["model"] == [SMOLLM2]


@pytest.mark.parametrize("width", [1280, 390])
def test_a_refusal_shows_in_the_panel_that_caused_it_saying_what_to_do(browser, live_server, width):
    """Issue 49.4: both texts guess ␣Paris, so patching has nothing to explain: the refusal is
    in Patching's own panel, not at the top of the page, and its text says what to change."""
    state = {"model": SMOLLM2, "text": CLEAN, "layer": 0, "head": 0, "view": "patching"}
    context, page = opened(browser, f"{live_server}/?{urlencode({**state, 'pc': CLEAN})}", width)
    wait_js(page, "!document.querySelector('#view-patching .view-error')?.hidden", 120)
    assert page.inner_text("#view-patching .view-error").startswith("The metric's two tokens")
    assert page.is_hidden("#run-error") and page.is_hidden("#patching-results")
    assert page.inner_text("#patching-summary").startswith("Patching needs two texts")
    page.fill("#patching-corrupted", CORRUPTED)
    page.press("#patching-corrupted", "Enter")
    page.dispatch_event("#patching-corrupted", "change")
    wait_js(page, "document.querySelector('#patching-approx-heads')?.data?.length > 0", 120)
    assert page.is_hidden("#view-patching .view-error")
    assert not page.errors
    context.close()
