"""A head over a corpus in Chromium (issue 41): a small MiniLM corpus run made with the CLI,
then its head page and the scatter of every head, at 1280 and 390 px, axe-clean, with state in
the URL and a click on a dot opening that head's page."""

from __future__ import annotations

from pathlib import Path

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


@pytest.fixture(scope="module")
def imported_trees(corpus_server, local_checkpoints, tmp_path_factory):
    """Two HeadVis trees imported into the server's store with the CLI: the specification's
    worked example (a model this server does not have) and one exported from a tiny Qwen 2 run.
    -> {model: run id}."""
    import json
    import urllib.request

    from app.main import create_app
    from atlas_engine.corpus.headvis_tree import export_tree
    from atlas_engine.corpus.job import plan, run_job
    from atlas_engine.corpus.store import Store
    from attention_atlas.cli import main as atlas
    from tests.atlas_engine.corpus.test_headvis_tree import PROSE as REPEATS
    from tests.conftest import make_settings
    from tests.support.headvis import write_example_tree

    root = tmp_path_factory.mktemp("trees")
    with urllib.request.urlopen(f"{corpus_server}/api/corpus") as answer:
        store_path = json.load(answer)["store"]
    app = create_app(make_settings(local_checkpoints, corpus_store=str(root / "qwen.sqlite")))
    loaded = app.state.manager.get("local/qwen2-tiny")
    (root / "texts.txt").write_text(REPEATS)
    qwen = Store(root / "qwen.sqlite")
    run = run_job(loaded, qwen, plan(qwen, loaded, str(root / "texts.txt"), 48, limit=20))
    export_tree(qwen, run, root / "qwen-tree")
    for tree in (write_example_tree(root / "example"), root / "qwen-tree"):
        atlas(["corpus", "import", str(tree), "--store", store_path])
    store = Store(Path(store_path))
    found = {r.model: r.id for r in store.runs() if r.source == "headvis"}
    store.close()
    return found


@pytest.mark.parametrize("width", [1280, 390])
def test_imported_headvis_trees_open_on_head_pages(browser, corpus_server, imported_trees, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    example = imported_trees["example-org/tiny-2x2"]
    page.goto(f"{corpus_server}/head/example-org/tiny-2x2/1/0?run={example}")
    wait_js(page, "document.querySelectorAll('#hv-sequences figure').length === 2")
    cards = page.inner_text("#hv-metrics")
    assert "HeadVis induction\n0.708" in cards and "HeadVis previous-token\n0.313" in cards
    assert page.is_hidden("#head-atlas") and "is not installed" in page.inner_text("#head-summary")
    assert page.locator("#hv-sequences a").count() == 0  # no model here: no explorer link
    first = page.locator("#hv-sequences figure").first
    assert (
        first.locator("figcaption").inner_text().startswith("Top interval · max activation 0.688")
    )
    first.locator(".hv-tok").nth(4).click()  # the second " the" as the query
    assert first.locator(".hv-tok.hv-query").count() == 1
    assert "reads" in first.locator("p.help").inner_text()
    fits = "document.documentElement.scrollWidth <= window.innerWidth + 1"
    assert page.evaluate(fits), "the page scrolls sideways"
    violations = Axe().run(page).response["violations"]
    assert not [v["id"] for v in violations if v["impact"] in ("critical", "serious")]

    qwen = imported_trees["local/qwen2-tiny"]
    page.goto(f"{corpus_server}/heads/local/qwen2-tiny?run={qwen}")
    wait_js(page, "document.querySelector('#heads-scatter')?.data?.length > 0")
    assert page.evaluate("document.querySelector('#heads-scatter').data[0].x.length") == 2 * 4
    assert page.eval_on_selector("#heads-x", "s => s.value") == "prev_token_score"
    page.goto(f"{corpus_server}/head/local/qwen2-tiny/1/2?run={qwen}")
    wait_js(page, "document.querySelectorAll('#hv-sequences figure').length > 0")
    assert page.evaluate(fits), "the page scrolls sideways"
    violations = Axe().run(page).response["violations"]
    assert not [v["id"] for v in violations if v["impact"] in ("critical", "serious")]
    assert not errors
    context.close()


def test_a_described_run_shows_headvis_beside_atlas(page, corpus_server):
    page.goto(f"{corpus_server}/head/{MINILM}/1/2")
    wait_js(page, "document.querySelectorAll('#hv-sequences figure').length > 0", 60)
    assert page.is_visible("#head-atlas") and page.is_visible("#hv-activation .main-svg")
    assert page.locator("#hv-sequences a").first.inner_text() == "Open in the explorer"
    page.goto(f"{corpus_server}/heads/{MINILM}?x=induction_score&y=previous")
    wait_js(page, "document.querySelector('#heads-scatter')?.data?.length > 0")
    groups = page.eval_on_selector_all("#heads-x optgroup", "gs => gs.map(g => g.label)")
    assert groups == ["Atlas: mean over texts", "HeadVis: pooled over every row"]
    assert page.eval_on_selector("#heads-x", "s => s.value") == "induction_score"
