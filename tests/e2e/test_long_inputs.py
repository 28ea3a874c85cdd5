"""Issue 9.8: 512-token inputs stay responsive and readable in every tab."""

from urllib.parse import urlencode

import pytest

from tests.e2e.helpers import TASK_GUARD_MS, answer_late, click_view, wait_js
from tests.e2e.pages import EXPLORER_TABS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MODELS = ("sentence-transformers/all-MiniLM-L6-v2", "HuggingFaceTB/SmolLM2-135M-Instruct")
LONG_TEXT = " ".join(["attention"] * 505) + " ends here."  # 510 tokens on either model
LONG_TASKS = """window.__long = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__long.push(Math.round(entry.duration));
}).observe({ type: "longtask", buffered: true });"""


@pytest.mark.parametrize("model", MODELS)
def test_no_long_main_thread_task_on_any_tab_at_512_tokens(page, live_server, model):
    page.add_init_script(LONG_TASKS)
    page.goto(f"{live_server}/?{urlencode({'model': model, 'text': LONG_TEXT})}")
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    assert page.locator("#tokens .token").count() >= 500
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(500)
    page.evaluate("window.__long = []")  # loading plotly.js itself is page load, not a tab

    def visit(tab: str) -> int:
        """The longest task while a tab draws."""
        page.evaluate("window.__long = []")
        click_view(page, tab)
        page.wait_for_load_state("networkidle")
        if tab == "grid":
            wait_js(
                page, "document.querySelector('#grid-status').textContent.includes('shown')", 120
            )
        wait_js(page, "document.querySelector('#view-busy').hidden", 60)
        page.wait_for_timeout(400)
        return max(page.evaluate("window.__long"), default=0)

    worst = {}
    for tab in (*EXPLORER_TABS, "heatmap"):
        if tab == "heatmap":
            page.select_option("#layer", "3")  # a map not drawn yet
        worst[tab] = max(worst.get(tab, 0), visit(tab))
        for _ in range(2):
            if worst[tab] <= TASK_GUARD_MS:
                break
            # On this 2-core machine the server, the browser and anything else running share
            # the cores: measure a slow tab again (after another tab), up to twice, since a task
            # that is really over the limit is over it every time, and a moment's contention
            # (a GC, the server answering the tab's request on both cores) is not.
            visit("heatmap" if tab != "heatmap" else "lines")
            worst[tab] = visit(tab)
    assert max(worst.values()) <= TASK_GUARD_MS, worst
    assert page.inner_text("#run-error") == ""


def test_long_maps_hover_with_text_and_label_density_follows_the_zoom(page, live_server):
    page.goto(f"{live_server}/?{urlencode({'model': MODELS[0], 'text': LONG_TEXT})}")
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(page, "document.querySelector('#heatmap').data.length > 0")
    tokens = page.locator("#tokens .token").all_inner_texts()
    page.evaluate("Plotly.Fx.hover(document.querySelector('#heatmap'), {xval: 470, yval: 480})")
    hover = page.text_content("#heatmap .hoverlayer")
    assert f"480 · {tokens[480]}" in hover and f"470 · {tokens[470]}" in hover
    before = page.evaluate("document.querySelector('#heatmap').layout.xaxis.tickvals")
    assert before[1] - before[0] > 1  # thinned at full size
    page.evaluate(
        "Plotly.relayout(document.querySelector('#heatmap'), {'xaxis.range': [100, 130]})"
    )
    wait_js(
        page,
        "(t => t[1] - t[0] === 1)(document.querySelector('#heatmap').layout.xaxis.tickvals)",
    )
    after = page.evaluate("document.querySelector('#heatmap').layout.xaxis.tickvals")
    assert after[0] >= 100 and after[-1] <= 130 and len(after) >= 25


def test_a_slow_view_says_it_is_working(page, live_server):
    page.goto(f"{live_server}/?{urlencode({'model': MODELS[1], 'text': LONG_TEXT})}")
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    wait_js(page, "document.querySelector('#view-busy').hidden", 60)  # the first view is drawn
    page.evaluate(
        """() => { window.__busy = false; const busy = document.querySelector('#view-busy');
        new MutationObserver(() => { if (!busy.hidden) window.__busy = true; })
          .observe(busy, { attributes: true }); }"""
    )
    # A new layer's maps and replay take a while on a slow machine; a fast one (CI) answers
    # within BUSY_AFTER_MS, so the server's answers are held back to make every machine slow.
    page.route("**/api/**", answer_late(1.0))  # longer than BUSY_AFTER_MS (300)
    page.select_option("#layer", "17")
    click_view(page, "steps")
    wait_js(page, "document.querySelector('#steps-grid .js-plotly-plot') !== null", 60)
    wait_js(page, "document.querySelector('#view-busy').hidden", 60)
    assert page.evaluate("window.__busy")
