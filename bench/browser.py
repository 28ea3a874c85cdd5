"""The front end in headless Chromium, measured side by side in one run: SmolLM2 at 16, 128 and 512
tokens in the explorer, and 512, 2,048 and 8,192 tokens in Deep zoom.

    .venv/bin/python -m bench.browser [--lengths 16,128,512,2048,8192]

Explorer: from submitting the text to the first heatmap painted, the time from the last byte of
the maps' answer to that paint, the all-heads grid complete (30 layers x 9 heads), the longest
main-thread task and the JS heap. Deep zoom: from running the model to the first overview painted
(the forward pass included), from the answer to the paint, zooming into a 64 x 64 window of single
weights, then every head at once: the head finder's table of every head's statistics complete
(30 layers x 9 heads, a layer a request, from its button), the longest task and the heap.
Then the longest task while each page loads, and the induction lab training its default run live.
The server is started as `make run` starts it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import sync_playwright
from transformers import AutoTokenizer

from atlas_engine.models.registry import SMOLLM2_ID
from atlas_engine.models.sources import smollm2_folder
from bench.compression import prose
from tests.e2e.helpers import TASK_BUDGET_MS, click_view, wait_js
from tests.support.live import REPO, start_server

# Runs in every page before its scripts: long tasks, and when a chart first holds data.
PROBES = """
window.__long = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__long.push(Math.round(e.duration));
}).observe({ type: "longtask", buffered: true });
window.__painted = {};
(function watch() {
  const charts = [["heatmap", "#view-heatmap .js-plotly-plot"], ["zoom", "#zoom-map"]];
  for (const [name, selector] of charts) {
    const gd = document.querySelector(selector);
    if (!(gd && gd.data && gd.data.length)) continue;
    const stamp = `${gd.data[0].z?.length} ${gd.layout?.xaxis?.range}`;
    if (window.__painted[name]?.stamp !== stamp) {
      window.__painted[name] = { stamp, at: performance.now() };
    }
  }
  requestAnimationFrame(watch);
})();
"""
RESPONSE_END = """(path) => Math.max(...performance.getEntriesByType('resource')
  .filter((e) => new URL(e.name).pathname === path).map((e) => e.responseEnd))"""


def wait_until_loaded(base: str, model_id: str, timeout: float = 300) -> None:
    """Until the server's preload of model_id is done: a page timed before would time the load."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/api/models/{model_id}/status") as response:
            if json.load(response)["state"] == "ready":
                return
        time.sleep(0.2)
    raise TimeoutError(f"{model_id} did not load in {timeout:.0f} s")


def heap_mb(cdp) -> float:
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return metrics["JSHeapUsedSize"] / 2**20


def explorer(page, cdp, base: str, text: str) -> dict:
    page.goto(f"{base}/?{urlencode({'model': SMOLLM2_ID})}")
    wait_js(page, "document.querySelector('#model').options.length > 0")
    page.wait_for_selector("#result:not([hidden])", timeout=300_000)  # the example runs first
    page.wait_for_load_state("networkidle")
    page.fill("#text", text)
    page.evaluate("window.__long = []; window.__painted = {}")
    start = page.evaluate("performance.now()")
    page.click("#run")
    wait_js(page, "window.__painted.heatmap", 300)
    painted = page.evaluate("window.__painted.heatmap.at")
    answer = page.evaluate(RESPONSE_END, "/api/attention")
    click_view(page, "grid")
    wait_js(page, "document.querySelector('#grid-status').textContent.includes('shown')", 300)
    grid = page.evaluate("performance.now()")
    page.wait_for_timeout(300)
    return {
        "first map": painted - start, "answer to paint": painted - answer,
        "all heads": grid - start,
        "longest task": max(page.evaluate("window.__long"), default=0), "heap": heap_mb(cdp),
    }  # fmt: skip


def deep_zoom(page, cdp, base: str, text: str, seq: int) -> dict:
    page.goto(f"{base}/zoom?{urlencode({'model': SMOLLM2_ID, 'layer': 15})}")
    wait_js(page, "document.querySelector('#zoom-model').options.length > 0")
    page.fill("#zoom-text", text)
    page.evaluate("window.__long = []; window.__painted = {}")
    start = page.evaluate("performance.now()")
    page.click("#zoom-run")
    wait_js(page, "document.querySelector('#zoom-window').textContent.startsWith('Layer')", 600)
    painted = page.evaluate("window.__painted.zoom.at")
    answer = page.evaluate(RESPONSE_END, "/api/attention/tiles")
    zoom_start = page.evaluate("performance.now()")
    page.evaluate(
        "Plotly.relayout(document.querySelector('#zoom-map'), "
        f"{{'xaxis.range': [{seq - 64.5}, {seq - 0.5}], 'yaxis.range': [{seq - 0.5}, {seq - 64.5}]}})"
    )
    wait_js(page, "document.querySelector('#zoom-window').textContent.includes('one weight')", 120)
    zoomed = page.evaluate("window.__painted.zoom.at")
    heads_start = page.evaluate("performance.now()")
    page.click("#zoom-heads-run")  # every head's statistics, a layer a request, the table filling
    wait_js(
        page, "document.querySelector('#zoom-heads-status').textContent.startsWith('Every')", 900
    )
    heads_done = page.evaluate("performance.now()")
    page.wait_for_timeout(300)
    return {
        "first map": painted - start, "answer to paint": painted - answer,
        "zoom in": zoomed - zoom_start, "all heads": heads_done - heads_start,
        "longest task": max(page.evaluate("window.__long"), default=0), "heap": heap_mb(cdp),
    }  # fmt: skip


LOADED_PAGES = ("/", "/zoom", "/lab", "/lab/tiling", "/learn", "/glossary", "/docs")


def open_an_operation(page) -> None:
    """On /docs: open POST /api/attention/tiles (Swagger UI resolves it, then draws it)."""
    page.evaluate("window.__long = []")
    block = page.locator(".opblock-post", has_text="/api/attention/tiles").first
    block.locator(".opblock-summary").click()
    block.get_by_role("heading", name="Request body").wait_for()
    page.wait_for_timeout(500)


def loading_tasks(browser, base: str, repeats: int = 3) -> None:
    """The longest main-thread task while each page loads (a fresh tab each time, so nothing is
    cached), worst of `repeats`; 0 where no task reached the 50 ms a long task starts at. On
    /docs, also while an operation is opened."""
    print(
        f"{'loading':<22} {'longest task, worst of ' + str(repeats):>26} (budget {TASK_BUDGET_MS} ms)"
    )
    for path in LOADED_PAGES:
        worst = opening = 0
        for _ in range(repeats):
            context = browser.new_context()
            page = context.new_page()
            page.add_init_script(PROBES)
            page.goto(f"{base}{path}")
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(500)
            worst = max(worst, max(page.evaluate("window.__long"), default=0))
            if path == "/docs":
                open_an_operation(page)
                opening = max(opening, max(page.evaluate("window.__long"), default=0))
            context.close()
        print(f"{path:<22} {worst:>24,.0f}ms")
        if path == "/docs":
            print(f"{'/docs, opening one':<22} {opening:>24,.0f}ms")


PHASE_SHOWN = (
    "document.querySelector('[data-metric=phase-change] .value')?.textContent.startsWith('step')"
)


def induction_lab(browser, base: str) -> None:
    """The induction lab with its default knobs (seed 0): from pressing Train to the phase change
    on screen and to the saved model, the longest task while it trains live (a snapshot drawn
    as each arrives) and while Play replays every snapshot."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.add_init_script(PROBES)
    page.goto(f"{base}/lab/induction")
    page.wait_for_load_state("networkidle")
    page.evaluate("window.__long = []")
    started = time.perf_counter()
    page.click("#train-start")
    wait_js(page, PHASE_SHOWN, 300)
    phase = time.perf_counter() - started
    wait_js(page, "!document.querySelector('#train-next').hidden", 300)
    done = time.perf_counter() - started
    training = max(page.evaluate("window.__long"), default=0)
    page.evaluate("window.__long = []")
    page.fill("#train-at", "0")
    page.dispatch_event("#train-at", "input")
    page.click("#train-play")
    wait_js(page, "document.querySelector('#train-play').textContent === 'Play'", 120)
    replay = max(page.evaluate("window.__long"), default=0)
    shown = page.inner_text("[data-metric=phase-change] .value")
    print(f"induction lab: phase change on screen {phase:.1f} s after Train ({shown}), "
          f"saved at {done:.1f} s; longest task training {training:,.0f} ms, "
          f"replaying {replay:,.0f} ms (budget {TASK_BUDGET_MS} ms)")  # fmt: skip
    page.close()


def run(lengths: list[int]) -> None:
    tokenizer = AutoTokenizer.from_pretrained(
        smollm2_folder(REPO / "var" / "cache", lambda *_: None)
    )
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp) / "server.log", {"ATLAS_PRELOAD": f'["{SMOLLM2_ID}"]'})
        try:
            wait_until_loaded(server.base, SMOLLM2_ID)
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path="/usr/bin/chromium", args=["--no-sandbox"]
                )
                print(f"{'page':<10} {'tokens':>6} {'first map':>10} {'answer→paint':>12} "
                      f"{'all heads':>10} {'zoom in':>8} {'longest task':>12} "
                      f"{'JS heap':>8}")  # fmt: skip
                for n in lengths:
                    pages = [("explorer", explorer)] if n <= 512 else []
                    pages += [("deep zoom", deep_zoom)] if n >= 512 else []
                    for name, measure in pages:
                        page = browser.new_page(viewport={"width": 1280, "height": 900})
                        page.add_init_script(PROBES)
                        cdp = page.context.new_cdp_session(page)
                        cdp.send("Performance.enable")
                        # Each page a text of its own (a new forward pass): Deep zoom's is one
                        # token shorter.
                        text = prose(tokenizer, n + 2 - (measure is deep_zoom))
                        args = (text, n) if measure is deep_zoom else (text,)
                        m = measure(page, cdp, server.base, *args)
                        zoom = f"{m['zoom in']:>6,.0f}ms" if "zoom in" in m else f"{'':>8}"
                        print(
                            f"{name:<10} {n:>6} {m['first map']:>8,.0f}ms "
                            f"{m['answer to paint']:>10,.0f}ms {m['all heads']:>8,.0f}ms {zoom} "
                            f"{m['longest task']:>10,.0f}ms {m['heap']:>6,.1f}MB"
                        )
                        page.close()
                loading_tasks(browser, server.base)
                induction_lab(browser, server.base)
                browser.close()
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="16,128,512,2048,8192")
    args = parser.parse_args()
    run([int(n) for n in args.lengths.split(",")])


if __name__ == "__main__":
    main()
