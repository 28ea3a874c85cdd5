"""Screenshots of the main views for the README: `make screenshots` (needs a running server).

    .venv/bin/python docs/make_screenshots.py http://127.0.0.1:8000
"""

import sys
import time
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import sync_playwright

ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
OUT = Path(__file__).parent / "screenshots"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
SENTENCE = "The animal didn't cross the street because it was too tired."


def wait(page, expression, timeout=90):
    deadline = time.monotonic() + timeout
    while not page.evaluate(f"() => {{ try {{ return {expression}; }} catch (e) {{ return null; }} }}"):
        if time.monotonic() > deadline:
            raise TimeoutError(expression)
        time.sleep(0.2)


def explorer(base, **state):
    return f"{base}/?{urlencode(state)}"


SHOTS = [
    ("explorer-heatmap", lambda b: explorer(b, model=MINILM, text=SENTENCE, layer=0, head=2), "#heatmap"),
    ("explorer-grid-gqa", lambda b: explorer(b, model=SMOLLM2, text=SENTENCE, view="grid", layer=3, head=4), "#grid-status"),
    ("explorer-lines", lambda b: explorer(b, model=MINILM, text=SENTENCE, view="lines", layer=1, head=3), "#lines svg"),
    ("explorer-query-key", lambda b: explorer(b, model=MINILM, text=SENTENCE, view="qk", layer=1, head=3, q=9), "#qk-bars"),
    ("explorer-mask-pair", lambda b: explorer(b, model=MINILM, text="The cat sat on the mat.", pair="It was tired.", view="mask", layer=1, head=3), "#mask-after"),
    ("explorer-mask-causal", lambda b: explorer(b, model=SMOLLM2, text=SENTENCE, view="mask", layer=5, head=1), "#mask-after"),
    ("explorer-without-scale", lambda b: explorer(b, model=MINILM, text=SENTENCE, view="whatif", layer=1, head=3), "#whatif-counterfactual"),
    ("lab-step-by-step", lambda b: f"{b}/lab/step-by-step", "#stage-grid .plot"),
    ("lab-masks", lambda b: f"{b}/lab/masks", "#masks-grid .plot"),
    ("lab-scaling", lambda b: f"{b}/lab/scaling", "#entropy-curve"),
    ("api-docs", lambda b: f"{b}/docs", ".opblock"),
    ("explorer-tokens-bytes", lambda b: explorer(b, model=SMOLLM2, text="Attention 😀 naïve שלום 注意", view="lines", heads="0,4,8"), "#lines svg"),
]


def main(base: str) -> None:
    OUT.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for width, suffix in ((1280, ""), (390, "-narrow")):
            page = browser.new_page(viewport={"width": width, "height": 800})
            for name, url, ready in SHOTS:
                if suffix and name not in ("explorer-heatmap", "lab-scaling", "lab-step-by-step", "explorer-mask-causal"):
                    continue
                page.goto(url(base))
                wait(page, f"document.querySelector('{ready}') !== null")
                if name == "explorer-grid-gqa":
                    wait(page, "document.querySelector('#grid-status').textContent.includes('shown')")
                page.wait_for_timeout(1500)
                page.screenshot(path=str(OUT / f"{name}{suffix}.png"), full_page=True)
                print("wrote", OUT / f"{name}{suffix}.png")
            page.close()
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000")
