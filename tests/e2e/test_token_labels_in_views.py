"""Issue 9.3 in the browser: chips, axis labels, hovers and lines show the same readable labels."""

import json
import urllib.request

import pytest

from tests.e2e.helpers import click_view, wait_js
from tests.e2e.pages import open_view

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
TEXT = "注意力机制 😀 שלום naïve"


def test_split_characters_read_the_same_everywhere(page, live_server):
    request = urllib.request.Request(
        f"{live_server}/api/attention",
        data=json.dumps({"model": SMOLLM2, "text": TEXT, "layers": [0], "heads": [0]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        tokens = json.loads(response.read())["tokens"]
    assert not any("\ufffd" in t for t in tokens)
    open_view(page, live_server, "explorer:heatmap", model=SMOLLM2, text=TEXT)
    wait_js(page, "document.querySelector('#heatmap').data.length > 0")
    assert page.locator("#tokens .token").all_inner_texts() == tokens
    ticks = page.evaluate("document.querySelector('#heatmap').layout.yaxis.ticktext")
    assert not any("\ufffd" in t for t in ticks) and any("‹" in t for t in ticks)
    q = next(i for i, t in enumerate(tokens) if "‹" in t)
    page.evaluate(f"Plotly.Fx.hover(document.querySelector('#heatmap'), {{xval: 0, yval: {q}}})")
    assert tokens[q] in page.text_content("#heatmap .hoverlayer")
    click_view(page, "lines")
    wait_js(page, "document.querySelectorAll('#lines text').length > 2")
    line_labels = page.evaluate(
        "[...document.querySelectorAll('#lines text[data-side=\"q\"]')].map(t => t.textContent)"
    )
    assert line_labels == tokens
    page.screenshot(path="/tmp/tokens-lines.png")
