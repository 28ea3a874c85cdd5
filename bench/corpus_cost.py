"""What the corpus job costs, side by side in one run, for both embedded models.

    .venv/bin/python -m bench.corpus_cost [--texts N]

- tokens a second of the job (atlas_engine.corpus.job.describe_text and the store's write, as
  `atlas corpus run` does it) against bare forward passes over the same texts (the base model
  with eager attention and no attention output), interleaved text by text. Goal: at least 0.8x.
- the job's peak memory above the loaded model (RSS, sampled every 2 ms).
- the store's bytes a head a text, and a head's dashboard read (GET .../heads/{l}/{h}).
- the head page's time to first paint and to its first chart in Chromium.
Needs python3-doc (`make corpus`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
import torch

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.corpus.job import describe_text, plan
from atlas_engine.corpus.sampling import Sampler
from atlas_engine.corpus.store import Store
from atlas_engine.inference.forward import tokenize
from atlas_engine.models.capture import implementation
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.services.corpus import head_dashboard


class PeakRss:
    """The largest resident set size above the start while the block runs."""

    def __enter__(self):
        self.process = psutil.Process()
        self.start = self.peak = self.process.memory_info().rss
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @property
    def above(self) -> float:
        return (self.peak - self.start) / 2**20


def measure(app, model_id: str, texts: int, folder: Path) -> None:
    loaded = app.state.manager.get(model_id)
    store = Store(folder / f"{model_id.replace('/', '_')}.sqlite")
    run = plan(store, loaded, "python-docs", 128, texts)
    pending = store.pending(run.id)

    def bare(text: str) -> None:
        inputs, _ = tokenize(loaded, text, None)
        with torch.inference_mode(), implementation(loaded.model, "eager"):
            loaded.model(**inputs)

    sampler = Sampler(store, run)
    describe_text(loaded, pending[0][1])  # first uses paid before timing
    bare(pending[0][1])
    job_s, bare_s, tokens = 0.0, 0.0, 0
    with PeakRss() as memory:
        for idx, text in pending:
            began = time.perf_counter()
            found = describe_text(loaded, text, sampler.settings)
            sampler.record(idx, found, found.keys, found.values, time.perf_counter() - began)
            job_s += time.perf_counter() - began
            began = time.perf_counter()
            bare(text)
            bare_s += time.perf_counter() - began
            tokens += found.tokens
    run = store.run(run.id)
    size = store.path.stat().st_size + sum(
        p.stat().st_size for p in folder.glob(f"{store.path.name}-*")
    )
    per_head = size / (run.layers * run.heads * run.done)
    reads = []
    for _ in range(5):
        began = time.perf_counter()
        head_dashboard(store, run.id, run.layers // 2, 0, None, 1)
        reads.append((time.perf_counter() - began) * 1000)
    print(
        f"{model_id.split('/')[-1]:<24} {run.done:>5} {tokens:>7} {tokens / bare_s:>9,.0f} "
        f"{tokens / job_s:>9,.0f} {bare_s / job_s:>6.2f}x {memory.above:>8.0f} "
        f"{per_head:>9,.0f} {statistics.median(reads):>9.1f}"
    )


def page_paint(texts: int) -> None:
    """The head page's first paint and first chart, from a server reading a store."""
    from playwright.sync_api import sync_playwright

    from tests.e2e.helpers import wait_js
    from tests.support.live import start_server

    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path("var/corpus.sqlite").resolve()
        server = start_server(Path(tmp) / "server.log", {"ATLAS_CORPUS_STORE": str(store_path)})
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                            args=["--headless", "--no-sandbox"])  # fmt: skip
                for model in (MINILM_ID, SMOLLM2_ID):
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    began = time.perf_counter()
                    page.goto(f"{server.base}/head/{model}/2/1")
                    wait_js(page, "document.querySelector('#head-histograms .js-plotly-plot')", 60)
                    chart = (time.perf_counter() - began) * 1000
                    paint = page.evaluate(
                        "performance.getEntriesByName('first-contentful-paint')[0]?.startTime"
                    )
                    print(
                        f"  head page of {model}: first paint {paint:.0f} ms, first chart {chart:.0f} ms"
                    )
                    page.close()
                browser.close()
        finally:
            server.stop()


def run(texts: int) -> None:
    app = create_app(Settings(preload=[]))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {texts} texts of "
          "python-docs, 128 tokens at most")  # fmt: skip
    print(
        f"{'model':<24} {'texts':>5} {'tokens':>7} {'bare t/s':>9} {'job t/s':>9} {'ratio':>7} "
        f"{'peak MB':>8} {'B/head/text':>9} {'read ms':>9}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for model_id in (MINILM_ID, SMOLLM2_ID):
            measure(app, model_id, texts, Path(tmp))
    page_paint(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=50)
    run(parser.parse_args().texts)


if __name__ == "__main__":
    main()
