"""Predictions under the heatmap: the API's top guesses as a strip, a row's top-k on hover, and
a plain sentence (no request) for a checkpoint without an LM head."""

import json
import re
import urllib.request

import pytest

from tests.e2e.helpers import wait_js
from tests.e2e.pages import open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TEXT = "One, two, three, four, five, six"


def api_predictions(live_server: str) -> dict:
    request = urllib.request.Request(
        f"{live_server}/api/attention/predictions",
        data=json.dumps({"model": SMOLLM2, "text": TEXT, "top_k": 5}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def test_the_strip_and_the_hover_show_the_models_own_predictions(page, live_server):
    answer = api_predictions(live_server)
    open_view(page, live_server, "explorer:heatmap", model=SMOLLM2, text=TEXT)
    wait_js(page, "document.querySelectorAll('.prediction-strip li').length > 0")
    chips = page.locator(".prediction-strip li")
    assert chips.count() == len(answer["tokens"])
    shown = page.evaluate(
        "[...document.querySelectorAll('.prediction-strip li')].map(li => "
        "[li.querySelector('.tok').textContent, li.querySelector('.predicted').textContent])"
    )
    expected = [
        [answer["tokens"][row["position"]], row["candidates"][0]["token"]]
        for row in answer["positions"]
    ]
    assert shown == expected
    hits = [row["actual_rank"] == 0 for row in answer["positions"]]
    assert (
        page.evaluate(
            "[...document.querySelectorAll('.prediction-strip li')].map(li => li.classList.contains('hit'))"
        )
        == hits
    )
    # a real pointer over row 5 (Plotly emits plotly_hover for the user's pointer only)
    page.locator("#heatmap").scroll_into_view_if_needed()
    box = page.locator("#heatmap .nsewdrag").first.bounding_box()
    n = len(answer["tokens"])
    page.mouse.move(box["x"] + 2, box["y"] + 2)
    page.mouse.move(box["x"] + box["width"] / (2 * n), box["y"] + box["height"] * 5.5 / n, steps=4)
    # The first move may hover row 0 on the way: wait for the pointer's last row.
    wait_js(
        page, r"/\(token [4-6]\)/.test(document.querySelector('.prediction-detail').textContent)"
    )
    detail = page.text_content(".prediction-detail")
    hovered = int(re.search(r"\(token (\d+)\)", detail)[1])
    assert abs(hovered - 5) <= 1  # the row under the pointer
    row = answer["positions"][hovered]
    assert f"“{answer['tokens'][hovered]}”" in detail
    assert all(c["token"] in detail for c in row["candidates"])
    page.screenshot(path="/tmp/predictions-strip.png", full_page=True)


def test_a_checkpoint_without_a_head_is_said_not_hidden(page, live_server):
    asked = []
    page.on("request", lambda r: asked.append(r.url) if "predictions" in r.url else None)
    open_view(page, live_server, "explorer:heatmap", model=MINILM, text="The [MASK] sat down.")
    wait_js(page, "document.querySelector('.predictions p.help') !== null")
    assert "no language-model head" in page.text_content(".predictions")
    assert not page.locator(".predictions").is_hidden()
    assert not [url for url in asked if "/api/attention/predictions" in url]
