"""Every picture in the README and docs/, made again from today's UI: `make screenshots`.

    .venv/bin/python docs/make_screenshots.py http://127.0.0.1:8765 [name ...]

Needs a running server (`make screenshots` starts one). Each shot opens a link as a user
would, waits for what it shows to be drawn, acts where a shot needs it (a click, a hover, a
zoom), and saves a PNG in docs/screenshots/. Names given on the command line make only those.
The notebook's picture comes from the notebook test (ATLAS_SCREENSHOTS set to this folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import Page, sync_playwright

ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).parent / "screenshots"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
SENTENCE = "The animal didn't cross the street because it was too tired."
EIFFEL = "The Eiffel Tower is in the city of"
IOI = ("When Mary and John went to the store, John gave a drink to",
       "When Mary and John went to the store, Mary gave a drink to")  # fmt: skip
DESKTOP, PHONE = (1280, 800), (390, 844)


def wait(page: Page, expression: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not page.evaluate(f"() => {{ try {{ return {expression}; }} catch (e) {{ return null; }} }}"):
        if time.monotonic() > deadline:
            raise TimeoutError(expression)
        time.sleep(0.2)


def settled(page: Page) -> None:
    """Until no request is pending and every visible chart has drawn."""
    page.wait_for_load_state("networkidle")
    wait(page, "[...document.querySelectorAll('.plot')].every(p => !p.offsetParent || (p.data && p.data.length))")
    page.wait_for_timeout(600)


def explorer(**state) -> str:
    return f"/?{urlencode(state)}"


def ran(page: Page) -> None:
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)
    settled(page)


def zoomed(page: Page) -> None:
    wait(page, "document.querySelector('#zoom-window').textContent.startsWith('Layer')", 600)
    settled(page)


def click_cell(page: Page, selector: str, row: int, col: int) -> None:
    left, top, width, height, n = page.evaluate(
        f"(() => {{ const p = document.querySelector('{selector}'); const r = p.querySelector('.nsewdrag')"
        ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height, p.data[0].z.length]; })()"
    )
    page.mouse.click(left + (col + 0.5) * width / n, top + (row + 0.5) * height / n)


def lesson_answered(page: Page) -> None:
    ran(page)
    wait(page, "document.querySelector('#heatmap').dataset.lessonBound === '1'")
    page.wait_for_timeout(500)
    click_cell(page, "#heatmap", 8, 7)  # 'street' -> 'the': the right answer
    wait(page, "document.querySelector('.lesson-feedback').dataset.kind === 'right'")


def generated(page: Page) -> None:
    ran(page)
    page.fill("#generate-count", "12")
    page.click("#generate-run")
    wait(page, "new URLSearchParams(location.search).has('gen')", 300)
    ran(page)


def query_hovered(page: Page) -> None:
    ran(page)
    wait(page, "document.querySelector('#qkspace-plot')?.data?.length > 0")
    page.evaluate(
        "(() => { const p = document.querySelector('#qkspace-plot');"
        " Plotly.Fx.hover(p, [{curveNumber: 0, pointNumber: 9}]); })()"
    )
    page.wait_for_timeout(800)


def trained(page: Page) -> None:
    """The induction lab's default run, trained to its end (about half a minute)."""
    page.click("#train-start")
    wait(page, "!document.querySelector('#train-next').hidden", 300)
    settled(page)


def image_drawn(page: Page) -> None:
    """The images page has run its model on the image and drawn it."""
    wait(page, "document.querySelector('#image-status').textContent.includes('forward pass')")
    settled(page)


def random_words_twice(words: str) -> Callable[[Page], None]:
    def act(page: Page) -> None:
        wait(page, "document.querySelector('#zoom-model').options.length > 0")
        page.select_option("#zoom-model", SMOLLM2)
        page.select_option("#zoom-example-length", words)
        page.click("#zoom-example")
        zoomed(page)

    return act


def zoom_into(rows: tuple[int, int], cols: tuple[int, int]) -> Callable[[Page], None]:
    def act(page: Page) -> None:
        random_words_twice("1000")(page)
        page.evaluate(
            "Plotly.relayout(document.querySelector('#zoom-map'), "
            f"{{'xaxis.range': [{cols[0] - 0.5}, {cols[1] - 0.5}], "
            f"'yaxis.range': [{rows[1] - 0.5}, {rows[0] - 0.5}]}})"
        )
        wait(page, "document.querySelector('#zoom-window').textContent.includes('one weight')", 120)
        settled(page)

    return act


def pass_key_found(page: Page) -> None:
    from tests.app.test_heads_api import PASS_KEY

    wait(page, "document.querySelector('#zoom-model').options.length > 0")
    page.select_option("#zoom-model", SMOLLM2)
    page.fill("#zoom-text", PASS_KEY)
    page.click("#zoom-run")
    zoomed(page)
    page.fill("#zoom-find", "71432")
    page.press("#zoom-find", "Enter")
    wait(page, "document.querySelector('#zoom-find-status').textContent.includes('2')")
    page.select_option("#zoom-read-from", "last")
    page.click("#zoom-heads-run")  # with tokens found, it colours every head by their share
    wait(page, "document.querySelector('#zoom-heads-status').textContent.startsWith('Every')", 600)
    settled(page)


def docs_operation(page: Page) -> None:
    wait(page, "document.querySelectorAll('.opblock').length > 0")
    block = page.locator(".opblock-post", has_text="/api/attention/heads").first
    block.locator(".opblock-summary").click()
    block.get_by_role("heading", name="Request body").wait_for()
    page.wait_for_timeout(500)


@dataclass(frozen=True)
class Shot:
    name: str
    url: str
    ready: Callable[[Page], None] = settled
    size: tuple[int, int] = DESKTOP
    full_page: bool = True


def _ran_then(view_ready: str) -> Callable[[Page], None]:
    def act(page: Page) -> None:
        ran(page)
        wait(page, view_ready)
        settled(page)

    return act


SHOTS = [
    # What a newcomer sees: the first picture, as it comes into view (no scrolling by hand).
    Shot("first-minute", "/", ran, full_page=False),
    Shot("explorer-heatmap-narrow", "/", ran, PHONE, full_page=False),
    Shot("lesson", "/learn/attention-basics?step=2", lesson_answered, full_page=False),
    Shot("explorer-heatmap", explorer(model=MINILM, text=SENTENCE, layer=0, head=2, colours="log"), ran),
    Shot("explorer-grid-gqa", explorer(model=SMOLLM2, text=SENTENCE, view="grid", layer=3, head=4),
         _ran_then("document.querySelector('#grid-status').textContent.includes('shown')")),
    Shot("explorer-lines", explorer(model=MINILM, text=SENTENCE, view="lines", layer=1, head=3), ran),
    Shot("explorer-query-key", explorer(model=MINILM, text=SENTENCE, view="qk", layer=1, head=3, q=10), ran),
    Shot("explorer-mask-pair", explorer(model=MINILM, text="The cat sat on the mat.", pair="It was tired.",
                                        view="mask", layer=1, head=3), ran),
    Shot("explorer-mask-causal", explorer(model=SMOLLM2, text=SENTENCE, view="mask", layer=5, head=1), ran),
    Shot("explorer-without-scale", explorer(model=MINILM, text=SENTENCE, view="whatif", layer=1, head=3), ran),
    Shot("explorer-tokens-bytes", explorer(model=SMOLLM2, text="Attention 😀 naïve שלום 注意", view="lines",
                                           layer=0, head=0, heads="0,4,8"), ran),
    Shot("explorer-compare", explorer(model=MINILM, text="The cat sat on the mat.", view="compare", layer=2,
                                      head=3, cmptext="The dog sat on the mat."), ran),
    Shot("explorer-generation", explorer(model=SMOLLM2, text="The capital of France is", layer=16, head=0),
         generated),
    Shot("explorer-qkspace", explorer(model=SMOLLM2, text=SENTENCE, view="qkspace", layer=4, head=7),
         query_hovered),
    Shot("explorer-lens", explorer(model=SMOLLM2, text=EIFFEL, view="lens", layer=23, head=4),
         _ran_then("document.querySelector('#lens-plot')?.data?.length > 0")),
    Shot("explorer-lens-narrow", explorer(model=SMOLLM2, text=EIFFEL, view="lens", layer=23, head=4),
         _ran_then("document.querySelector('#lens-plot')?.data?.length > 0"), PHONE),
    Shot("explorer-attribution", explorer(model=SMOLLM2, text=EIFFEL, view="attribution", layer=23, head=4),
         _ran_then("document.querySelector('#attribution-source')?.data?.length > 0")),
    Shot("explorer-patching", explorer(model=SMOLLM2, text=IOI[0], view="patching", layer=23, head=3, pc=IOI[1], px=1),
         _ran_then("document.querySelector('#patching-exact-heads')?.data?.length > 0")),
    Shot("head-page", f"/head/{SMOLLM2}/17/5?text=The+cat+sat+on+the+mat.",
         lambda page: wait(page, "document.querySelectorAll('#head-texts .js-plotly-plot').length >= 10")
         or wait(page, "document.querySelector('#head-verdict').textContent.startsWith('On your text')")),
    Shot("heads-scatter", f"/heads/{SMOLLM2}?x=previous&y=induction&find=induction&min=0.3",
         lambda page: wait(page, "document.querySelector('#heads-scatter')?.data?.length > 0")),
    Shot("lab-what-a-head-is", "/lab/what-a-head-is"),
    Shot("lab-forward-pass", "/lab/forward-pass"),
    Shot("lab-step-by-step", "/lab/step-by-step"),
    Shot("lab-step-by-step-narrow", "/lab/step-by-step", size=PHONE),
    Shot("lab-scaling", "/lab/scaling"),
    Shot("lab-masks", "/lab/masks"),
    Shot("lab-heads", "/lab/heads"),
    Shot("lab-sparse", "/lab/sparse"),
    Shot("lab-positions", "/lab/positions"),
    Shot("lab-tiling", "/lab/tiling"),
    Shot("lab-induction", "/lab/induction", trained),
    Shot("image-eye", "/image?sample=chelsea&q=102&layer=11&head=5", image_drawn),
    Shot("image-heads", "/image?sample=chelsea&view=heads&layer=11", image_drawn),
    Shot("image-distance", "/image?sample=rocket&view=distance", image_drawn),
    Shot("image-narrow", "/image?sample=coffee&view=rollout", image_drawn, size=PHONE),
    Shot("learn", "/learn"),
    Shot("glossary", "/glossary", full_page=False),
    Shot("api-docs", "/docs", docs_operation, full_page=False),
    Shot("zoom", f"/zoom?{urlencode({'model': SMOLLM2, 'layer': 18, 'head': 6})}", random_words_twice("1000")),
    Shot("zoom-narrow", f"/zoom?{urlencode({'model': SMOLLM2, 'layer': 18, 'head': 6})}",
         random_words_twice("1000"), PHONE),
    Shot("zoom-tokens", f"/zoom?{urlencode({'model': SMOLLM2, 'layer': 18, 'head': 6})}",
         zoom_into((1800, 1840), (640, 680))),
    Shot("zoom-log", f"/zoom?{urlencode({'model': SMOLLM2, 'layer': 3, 'head': 1, 'colours': 'log'})}",
         random_words_twice("2000")),
    Shot("zoom-retrieval", f"/zoom?{urlencode({'model': SMOLLM2, 'layer': 23, 'head': 2})}", pass_key_found),
]  # fmt: skip


def notebook_picture() -> None:
    """The widget in JupyterLab: the notebook test draws it and keeps its picture here."""
    env = {**os.environ, "ATLAS_SCREENSHOTS": str(OUT), "HF_HUB_OFFLINE": "1"}
    test = "tests/e2e/test_notebook.py::test_the_widget_draws_the_explorers_views_in_jupyterlab"
    subprocess.run([sys.executable, "-m", "pytest", "-q", test], cwd=REPO, env=env, check=True)


def main(base: str, only: list[str]) -> None:
    OUT.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for shot in SHOTS:
            if only and shot.name not in only:
                continue
            context = browser.new_context(viewport={"width": shot.size[0], "height": shot.size[1]})
            page = context.new_page()
            page.goto(base + shot.url)
            shot.ready(page)
            page.screenshot(path=str(OUT / f"{shot.name}.png"), full_page=shot.full_page)
            print("wrote", OUT / f"{shot.name}.png", flush=True)
            context.close()
        browser.close()
    if not only or "notebook-query-key" in only:
        notebook_picture()


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000", sys.argv[2:])
