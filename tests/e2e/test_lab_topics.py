"""Issue 11: every topic's lab page draws live in Chromium, shows the API's own numbers, keeps its
inputs in the URL, and recomputes without a main-thread task over 200 ms."""

import json
import urllib.request

import pytest

from tests.e2e.helpers import wait_js
from tests.e2e.pages import LAB_TOPICS, settle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LONG_TASKS = """window.__long = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__long.push(Math.round(entry.duration));
}).observe({ type: "longtask", buffered: true });"""

# (page, a form input to change, its new value, the metric or table that must follow the API)
CHANGES = {
    "heads": ("#heads-kv", "2"),
    "cross": ("#cross-layer", "3"),
    "scoring": ("#scoring-seed", "5"),
    "tiling": ("#tiling-bk", "2"),
    "linear": ("#linear-seed", "3"),
    "sparse": ("#sparse-window", "3"),
    "positions": ("#positions-offset", "7"),
    "padding": ("#padding-head", "1"),
    "cost": ("#cost-n", "1000000"),
}


def api(base, path, body):
    request = urllib.request.Request(
        f"{base}/api/lab/{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def metric(page, name):
    return page.locator(f"[data-metric='{name}'] .value").inner_text()


@pytest.mark.parametrize("topic", LAB_TOPICS)
def test_each_topic_draws_and_recomputes_without_a_long_task(page, live_server, topic):
    page.add_init_script(LONG_TASKS)
    page.goto(f"{live_server}/lab/{topic}")
    settle(page)
    assert page.locator(".js-plotly-plot, .table-wrap").count() >= 1
    assert page.locator("[role=alert]:not([hidden])").count() == 0
    selector, value = CHANGES[topic]
    page.evaluate("window.__long = []")
    page.fill(selector, value)
    page.dispatch_event(selector, "change")
    page.wait_for_timeout(400)
    settle(page)
    assert f"={value}" in page.url  # the input is in the URL
    assert page.locator("[role=alert]:not([hidden])").count() == 0, page.content()[:500]
    assert max(page.evaluate("window.__long"), default=0) <= 200
    assert page.errors == []


def test_tiling_steps_show_the_api_state_and_survive_a_reload(page, live_server):
    page.goto(f"{live_server}/lab/tiling?step=3&bk=2")
    settle(page)
    wait_js(page, "document.querySelector('#tiling-step-value').textContent.startsWith('4 of')")
    body = api(live_server, "tiling", {"n_q": 8, "n_k": 8, "d": 4, "block_q": 4, "block_k": 2})
    step = body["steps"][3]
    cells = page.locator("#tiling-row-table tbody tr").first.locator("td").all_inner_texts()
    assert float(cells[2]) == pytest.approx(step["row_sum"][0], abs=1e-4)
    assert metric(page, "max-diff") == f"{body['max_abs_diff']:.1e}"
    page.reload()
    settle(page)
    assert page.locator("#tiling-step-value").inner_text().startswith("4 of")


def test_the_kv_cache_table_and_heads_numbers_equal_the_api(page, live_server):
    page.goto(f"{live_server}/lab/heads")
    settle(page)
    wait_js(page, "document.querySelector('#kv-cache-table') !== null")
    rows = page.locator("#kv-cache-table tbody tr").all_inner_texts()
    assert "23,040 B" in rows[1] and "GQA" in rows[1]
    body = api(live_server, "heads", {"model": "sentence-transformers/all-MiniLM-L6-v2",
               "text": page.input_value("#heads-text"), "kv_heads": 4})  # fmt: skip
    mean = sum(body["moved"]) / len(body["moved"])
    assert metric(page, "moved-mean") == f"{mean:.3f}"


def test_positions_and_rope_head_show_the_api_numbers(page, live_server):
    page.goto(f"{live_server}/lab/positions")
    settle(page)
    page.click("#rope-form button[type=submit]")
    wait_js(page, "document.querySelector(\"[data-metric='rope-replay']\") !== null", 120)
    assert metric(page, "rope-replay") == "0.0e+0"
    before, after = (float(x) for x in metric(page, "rope-previous").split(" / "))
    assert before > 0.5 > after


def test_padding_shows_zero_weight_on_padded_keys(page, live_server):
    page.goto(f"{live_server}/lab/padding")
    settle(page)
    assert metric(page, "pad-weight") == "0"
    assert float(metric(page, "alone")) < 1e-5
