"""What the corpus job costs, side by side in one run, for both embedded models.

    .venv/bin/python -m bench.corpus_cost [--texts N] [--sizes 1 8 16] [--threads N] [--pages]
    .venv/bin/python -m bench.corpus_cost --dtypes bfloat16 float16   (ATLAS_DEVICE=cuda on a GPU)

For each batch size, the same texts in the same batches (atlas_engine.corpus.job.batches:
sorted by length within a window, padded on the right), batch by batch, interleaved:

- the job: describe_batch and the store's write of the batch (Sampler.record_many), as
  `atlas corpus run` does it;
- bare eager: the model's own forward over the batch (transformers' eager attention, the
  attention the job needs to see the maps, the whole model to its last hidden state, no maps
  returned): the reference of the goal, the job at least 0.8x its tokens a second;
- bare sdpa: the same with PyTorch's fused attention, which never makes the maps (a
  second reference: what a pass that needs no maps costs).

Tokens a second count real tokens only (no padding). Peak memory: the job's largest resident
set above its start (sampled every 2 ms, the bare passes not counted). Then the store's bytes
a head a text, a head's dashboard read, and the share of the job's time spent writing the
store; with --pages, the head page in Chromium. Needs python3-doc (`make corpus`). On a shared
machine, run it when `uptime` shows the load low: contention slows a job of many small
operations more than a bare pass, and --threads 1 is the steadier comparison there.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil
import torch

from atlas_engine.config import Settings
from atlas_engine.corpus.job import batches, describe_batch, encode_batch, plan
from atlas_engine.corpus.sampling import Sampler
from atlas_engine.corpus.store import Store
from atlas_engine.models.capture import implementation
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.services.corpus import head_dashboard
from attention_core.head_stats import STATISTICS


class PeakRss:
    """The largest resident set size above the start while the block runs."""

    def __enter__(self):
        self.process = psutil.Process()
        self.start = self.peak = self.process.memory_info().rss
        self.running = self.counting = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            if self.counting:
                self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.002)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """What runs inside is not counted."""
        self.counting = False
        try:
            yield
        finally:
            self.counting = True

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @property
    def above(self) -> float:
        return (self.peak - self.start) / 2**20


def bare(loaded, texts: list[str], kernel: str) -> None:
    """transformers' forward over the padded batch, with `kernel` attention."""
    inputs = encode_batch(loaded, texts).inputs
    with torch.inference_mode(), implementation(loaded.model, kernel):
        loaded.model(**inputs)


def measure(loaded, size: int, texts: int, folder: Path) -> None:
    """One batch size: the job, bare eager and bare sdpa over the same batches, interleaved."""
    store = Store(folder / f"{loaded.id.replace('/', '_')}-{size}.sqlite")
    run = plan(store, loaded, "python-docs", 128, texts)
    sampler = Sampler(store, run)
    pending = store.pending(run.id)
    warm = [item for item in pending if item[0] < sampler.settings.warmup_size]
    rest = [item for item in pending if item[0] >= sampler.settings.warmup_size]
    cut = [batch for part in (warm, rest) for batch in batches(loaded, part, size)]
    first = [text for _, text in cut[0]]
    describe_batch(loaded, first)  # first uses paid before timing
    bare(loaded, first, "eager")
    bare(loaded, first, "sdpa")
    spent = {"job": 0.0, "eager": 0.0, "sdpa": 0.0, "write": 0.0}
    tokens = 0
    with PeakRss() as memory:
        for batch in cut:
            chunk = [text for _, text in batch]
            began = time.perf_counter()
            found = describe_batch(
                loaded, chunk, sampler.settings,
                lambda first, activation, at=[i for i, _ in batch]: sampler.wanted(at, activation, first),
            )  # fmt: skip
            seconds = time.perf_counter() - began
            sampler.record_many([(idx, one, one.keys, one.values, seconds / len(batch))
                                 for (idx, _), one in zip(batch, found, strict=True)])  # fmt: skip
            spent["job"] += time.perf_counter() - began
            spent["write"] += time.perf_counter() - began - seconds
            with memory.paused():
                for kernel in ("eager", "sdpa"):
                    began = time.perf_counter()
                    bare(loaded, chunk, kernel)
                    spent[kernel] += time.perf_counter() - began
            tokens += sum(one.tokens for one in found)
    rate = {name: tokens / seconds for name, seconds in spent.items()}
    write_share = spent["write"] / spent["job"]
    run = store.run(run.id)
    size_bytes = store.path.stat().st_size + sum(
        p.stat().st_size for p in folder.glob(f"{store.path.name}-*")
    )
    per_head = size_bytes / (run.layers * run.heads * run.done)
    reads = []
    for _ in range(5):
        began = time.perf_counter()
        head_dashboard(store, run.id, run.layers // 2, 0, None, 1)
        reads.append((time.perf_counter() - began) * 1000)
    print(
        f"{loaded.id.split('/')[-1]:<24} {size:>5} {tokens:>7} {rate['eager']:>10,.0f} "
        f"{rate['sdpa']:>10,.0f} {rate['job']:>9,.0f} {rate['job'] / rate['eager']:>6.2f}x "
        f"{rate['job'] / rate['sdpa']:>6.2f}x {memory.above:>8.0f} {per_head:>7,.0f} "
        f"{statistics.median(reads):>7.1f} {write_share:>6.0%}",
        flush=True,
    )
    store.close()


def precision(dtypes: list[str], count: int = 16) -> None:
    """How far a job run in half precision lands from float32: the same texts described by
    each model loaded in each dtype (on the settings' device: a GPU where there is one),
    against float32. Atlas's statistics are shares and means in [0, 1] (distance in tokens);
    HeadVis's sums are per row here (each divided by the text's tokens)."""
    from atlas_engine.corpus.texts import paragraphs, sequences

    for model_id in (MINILM_ID, SMOLLM2_ID):
        found = {}
        for dtype in ["float32", *dtypes]:
            manager = ModelManager.from_settings(Settings(preload=[], dtype=dtype), max_loaded=1)
            loaded = manager.get(model_id)

            def count_tokens(text: str, loaded=loaded) -> int:
                return len(loaded.tokenizer(text)["input_ids"])

            texts = list(sequences(paragraphs("python-docs"), count_tokens, 128, count))
            found[dtype] = [one for i in range(0, count, 8)
                            for one in describe_batch(loaded, texts[i : i + 8])]  # fmt: skip
        base = found["float32"]
        rows = [0, 1, 2, 5]  # HeadVis's self, previous, entropy and induction sums: per row
        for dtype in dtypes:
            pairs = list(zip(found[dtype], base, strict=True))
            stats = np.stack([abs(a.stats - b.stats) for a, b in pairs])  # NaN: no row counted
            shares = np.delete(stats, STATISTICS.index("distance"), axis=-1)
            distance = stats[..., STATISTICS.index("distance")]
            sums = np.stack([abs(a.headvis - b.headvis)[..., rows] / a.tokens for a, b in pairs])
            active = np.stack([abs(a.headvis - b.headvis)[..., -1] for a, b in pairs])
            print(
                f"  {model_id.split('/')[-1]} in {dtype}: Atlas's shares max |Δ| "
                f"{np.nanmax(shares):.4f} (mean {np.nanmean(shares):.5f}); distance max |Δ| "
                f"{np.nanmax(distance):.3f} tokens; HeadVis's sums a row max |Δ| "
                f"{sums.max():.4f}, max_activation {active.max():.4f}",
                flush=True,
            )


def page_paint() -> None:
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


def run(texts: int, sizes: list[int], pages: bool) -> None:
    manager = ModelManager.from_settings(Settings(preload=[]), max_loaded=2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {texts} texts of "
          "python-docs, 128 tokens at most; tokens/s of real tokens")  # fmt: skip
    print(
        f"{'model':<24} {'batch':>5} {'tokens':>7} {'bare eager':>10} {'bare sdpa':>10} "
        f"{'job':>9} {'÷eager':>7} {'÷sdpa':>7} {'peak MB':>8} {'B/h/t':>7} {'read ms':>7} "
        f"{'write':>6}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for model_id in (MINILM_ID, SMOLLM2_ID):
            loaded = manager.get(model_id)
            for size in sizes:
                measure(loaded, size, texts, Path(tmp))
    if pages:
        page_paint()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=48)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--pages", action="store_true", help="and the head page in Chromium")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: its own)")
    parser.add_argument("--dtypes", nargs="*", default=[], choices=["bfloat16", "float16"],
                        help="only: how far the job in these dtypes lands from float32")  # fmt: skip
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.dtypes:
        precision(args.dtypes)
        return
    run(args.texts, args.sizes, args.pages)


if __name__ == "__main__":
    main()
