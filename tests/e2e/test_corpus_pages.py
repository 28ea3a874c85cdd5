"""A head over a corpus in Chromium (issue 41): a small MiniLM corpus run made with the CLI,
then its head page and the scatter of every head, at 1280 and 390 px, axe-clean, with state in
the URL and a click on a dot opening that head's page."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe

from atlas_engine.models.registry import SMOLLM2_ID as SMOLLM2
from tests.e2e.helpers import wait_js
from tests.e2e.pages import MINILM, PROSE
from tests.support.live import start_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.parametrize("width", [1280, 390])
def test_a_heads_page_shows_it_over_the_corpus(browser, corpus_server, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{corpus_server}/head/{MINILM}/1/2?metric=previous")
    wait_js(page, "document.querySelectorAll('#head-texts .js-plotly-plot').length >= 6", 60)
    summary = page.inner_text("#head-summary")
    assert summary.startswith("Over 6 texts of") and "ranked by previous token" in summary
    assert page.eval_on_selector("#head-metric", "s => s.value") == "previous"
    assert page.locator("#head-histograms .js-plotly-plot").count() == 8
    assert page.locator("#head-to tbody tr").count() > 0
    fits = "document.documentElement.scrollWidth <= window.innerWidth + 1"
    assert page.evaluate(fits), "the page scrolls sideways"
    page.fill("#head-text", "The cat sat on the mat.")
    page.click("#head-compare button")
    wait_js(page, "document.querySelector('#head-verdict').textContent.startsWith('On your text')")
    assert "text=The+cat" in page.url
    violations = Axe().run(page).response["violations"]
    assert not [v["id"] for v in violations if v["impact"] in ("critical", "serious")]
    assert not errors
    context.close()


def test_the_scatter_opens_a_heads_page(page, corpus_server):
    page.goto(f"{corpus_server}/heads/{MINILM}?x=previous&y=entropy&find=previous&min=0.3")
    wait_js(page, "document.querySelector('#heads-scatter')?.data?.length > 0")
    points = page.evaluate("document.querySelector('#heads-scatter').data[0].x.length")
    assert points == 6 * 12
    found = page.locator("#heads-found tbody tr")
    assert found.count() >= 1
    first = found.first.locator("a")
    href = first.get_attribute("href")
    first.click()
    page.wait_for_url(f"**{href}")
    page.wait_for_selector("#head-histograms .js-plotly-plot")
    violations = Axe().run(page).response["violations"]
    assert not [v["id"] for v in violations if v["impact"] in ("critical", "serious")]


def test_the_pages_follow_the_servers_own_corpus_job(browser, tmp_path):
    """`make run`'s way: the server answers at once and describes the models behind its
    requests; a head's page opened before its model's turn says so, then fills in by itself."""
    (tmp_path / "prose.txt").write_text("\n\n".join([PROSE] * 2))  # 3 texts of 128 tokens
    server = start_server(tmp_path / "server.log", {
        "ATLAS_CORPUS_STORE": str(tmp_path / "corpus.sqlite"),
        "ATLAS_CORPUS_SOURCE": str(tmp_path / "prose.txt"),
        "ATLAS_CORPUS_TEXTS": "3",
        "ATLAS_CORPUS_MODELS": f'["{SMOLLM2}", "{MINILM}"]',
    })  # fmt: skip
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{server.base}/head/{MINILM}/0/2")
        wait_js(page, "!document.querySelector('#head-progress').hidden", 30)
        waiting = page.inner_text("#head-progress")
        assert "all-MiniLM-L6-v2" in waiting and ("next" in waiting or "describing" in waiting)
        wait_js(page, "document.querySelectorAll('#head-texts .js-plotly-plot').length >= 3", 300)
        wait_js(page, "document.querySelector('#head-progress').hidden", 60)
        assert page.inner_text("#head-summary").startswith("Over 3 texts of")
        lines = [line for line in server.log().splitlines() if "corpus job:" in line]
        assert any("3 of 3 texts" in line and line.endswith(", done") for line in lines)
        assert "\r" not in server.log()
        page.close()
    finally:
        server.stop()
