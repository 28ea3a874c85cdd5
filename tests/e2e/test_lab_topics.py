"""Issue 11: every topic's lab page draws live in Chromium, shows the API's own numbers, keeps its
inputs in the URL, and recomputes without a main-thread task over 200 ms."""

import json
import urllib.parse
import urllib.request

import pytest

from atlas_engine.models.loader import FULL_MAPS_MAX_TOKENS
from atlas_engine.schemas.lab_models import MAX_LAB_REAL_TOKENS
from tests.e2e.helpers import LONG_TASKS, TASK_GUARD_MS, wait_js
from tests.e2e.pages import LAB_TOPICS, settle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


# (page, a form input to change, its new value, the metric or table that must follow the API)
CHANGES = {
    "what-a-head-is": ("#what-head", "5"),
    "forward-pass": ("#pass-layer", "3"),
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
    assert max(page.evaluate("window.__long"), default=0) <= TASK_GUARD_MS
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


def test_what_a_head_is_shows_the_api_checks_and_tokens_as_text(page, live_server):
    text = "A <b>bold</b> & odd sentence."
    page.goto(f"{live_server}/lab/what-a-head-is?text={urllib.parse.quote(text)}&head=4")
    settle(page)
    wait_js(page, "document.querySelector(\"[data-metric='output-diff']\") !== null", 120)
    body = api(live_server, "what-a-head-is", {"model": "sentence-transformers/all-MiniLM-L6-v2",
               "text": text, "layer": 0, "head": 4})  # fmt: skip
    shown = float(metric(page, "output-diff"))  # one significant digit, as JS writes it
    assert shown == pytest.approx(body["output_max_abs_diff"], rel=0.05, abs=1e-12)
    assert page.locator("#what-heads [aria-pressed=true]").inner_text() == "head 4"
    assert page.locator("main b").count() == 0  # the token "<b>" stayed text
    ticks = page.locator("#what-x .ytick text").all_text_contents()
    assert "<" in ticks and "b" in ticks
    page.click("#what-heads button >> nth=7")
    wait_js(page, "location.search.includes('head=7')")
    wait_js(page, "document.querySelector('#what-head-title').textContent.includes('Head 7')", 60)
    assert "head=7" in page.get_attribute("#what-explorer", "href")


def test_forward_pass_shows_the_api_next_token_and_opens_a_block(page, live_server):
    page.goto(f"{live_server}/lab/forward-pass")
    settle(page)
    wait_js(page, "document.querySelector(\"[data-metric='next']\") !== null", 120)
    body = api(live_server, "forward-pass", {"text": page.input_value("#pass-text")})
    assert metric(page, "next") == body["next_token"][0]["token"]
    rows = page.locator("#pass-guess-table tbody tr").count()
    assert rows == len(body["tokens"])
    page.fill("#pass-layer", "7")
    page.dispatch_event("#pass-layer", "change")
    wait_js(page, "document.querySelector('#pass-block-title').textContent.endsWith('block 7')", 60)
    assert page.locator("#pass-heads a").count() == 9
    assert "layer=7" in page.get_attribute("#pass-explorer", "href")


# Each page that runs a model: its model menu (None: MiniLM, always) and the longest text it
# takes, the lab's own limit or the explorer's (Why √d's real head reads every map at once).
MODEL_NOTES = {
    "cross": ("#cross-model", MAX_LAB_REAL_TOKENS),
    "heads": ("#heads-model", MAX_LAB_REAL_TOKENS),
    "sparse": ("#sparse-model", MAX_LAB_REAL_TOKENS),
    "positions": ("#rope-model", MAX_LAB_REAL_TOKENS),
    "padding": ("#padding-model", MAX_LAB_REAL_TOKENS),
    "scaling": (None, FULL_MAPS_MAX_TOKENS),
}


def test_each_page_that_runs_a_model_says_what_it_is_and_this_pages_token_limit(page, live_server):
    with urllib.request.urlopen(f"{live_server}/api/models", timeout=30) as response:
        described = {m["id"]: m["description"] for m in json.load(response)["models"]}
    for topic, (menu, limit) in MODEL_NOTES.items():
        page.goto(f"{live_server}/lab/{topic}")
        note = f"{menu}-note" if menu else "#real-model-note"
        wait_js(page, f"document.querySelector('{note}').textContent !== ''")
        model = page.input_value(menu) if menu else "sentence-transformers/all-MiniLM-L6-v2"
        expected = f"{described[model]} This page takes texts of up to {limit:,} tokens."
        assert page.inner_text(note) == expected, topic
    assert page.errors == []
