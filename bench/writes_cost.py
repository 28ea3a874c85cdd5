"""What the logit lens, direct logit attribution and patching cost against one forward pass,
side by side in one run, on SmolLM2 (the embedded model with a language-model head).

    .venv/bin/python -m bench.writes_cost [--repeats N]

"One pass" is the with-head model's own forward over the text (eager attention, logits at
every position): what `model(**inputs)` costs in transformers. Each feature is timed as its
route computes it, interleaved with the pass, medians of N:
- lens: the pass taken apart (atlas_engine.inference.residual.run_stream) and every layer's stream at
  every position through the final norm and the head, top-5 and one token's probability
  (goal: at most 1.5 passes; each row is the whole unembedding, 6.5 passes' multiply-adds a
  position on SmolLM2, so the goal holds only for a few positions: "lens@1" reads the last);
- attribution: the pass taken apart, every piece's direct effect at the last position and one
  head split by key (goal: at most 1.5 passes);
- attribution patching: the clean pass taken apart, the corrupted one with autograd, and one
  backward pass through it (goal: at most 3 passes);
- exact patching: every head's and every (layer, position)'s rerun, reported per component.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.attribution import attribute, head_sources
from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.lens import logit_lens
from atlas_engine.inference.patching import Metric, attribution_patching, exact_heads, exact_stream
from atlas_engine.inference.residual import run_stream
from atlas_engine.models.capture import implementation
from atlas_engine.models.registry import SMOLLM2_ID
from bench.compression import prose

LENGTHS = (16, 64, 256)
PATCH_LENGTHS = (16, 64)  # patching takes texts of at most 64 tokens


def ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def corrupted(inputs: dict) -> dict:
    """The same ids with the middle token swapped for another (a one-token corruption)."""
    ids = inputs["input_ids"].clone()
    middle = ids.shape[1] // 2
    ids[0, middle] = (ids[0, middle] + 1) % 49152
    return {**inputs, "input_ids": ids}


def measure(loaded, n: int, repeats: int) -> None:
    inputs, _ = tokenize(loaded, prose(loaded.tokenizer, n), None)
    seq = inputs["input_ids"].shape[1]
    last = seq - 1
    other = corrupted(inputs)

    def bare():
        with torch.inference_mode(), implementation(loaded.model, "eager"):
            loaded.predictor(**inputs)

    def lens():
        stream = run_stream(loaded, inputs)
        logit_lens(loaded, stream, list(range(seq)), 5, chosen=7042)

    def lens_last():
        stream = run_stream(loaded, inputs)
        logit_lens(loaded, stream, [last], 5, chosen=7042)

    def attribution():
        stream = run_stream(loaded, inputs, weights_of=20)
        attribute(loaded, stream, last, 7042, None)
        head_sources(loaded, stream, 20, 0, last, 7042, None)

    clean = run_stream(loaded, inputs)
    metric = Metric(last, 7042, 7268)
    with torch.inference_mode():
        clean_value = float(metric.of(loaded, clean)[0])

    def patching():
        clean_stream = run_stream(loaded, inputs)
        run = run_stream(loaded, other, grad=True)
        attribution_patching(loaded, run, clean_stream, metric, clean_value, clean_value - 1)

    jobs = {"bare": bare, "lens": lens, "lens at one": lens_last, "attribution": attribution}
    if n in PATCH_LENGTHS:
        jobs["attribution patching"] = patching
    for job in jobs.values():
        job()  # first uses paid before timing
    times: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            times[name].append(ms(job))
    base = statistics.median(times["bare"])
    cells = [f"{seq:>6} {base:>8.1f}"]
    for name in ("lens", "lens at one", "attribution", "attribution patching"):
        if name in times:
            median = statistics.median(times[name])
            cells.append(f"{median:>9.1f} {median / base:>5.2f}x")
        else:
            cells.append(f"{'-':>9} {'-':>6}")
    if n in PATCH_LENGTHS:
        arch = loaded.arch
        none, step = (lambda: False), (lambda *a: None)
        heads_ms = ms(lambda: exact_heads(loaded, other, clean, metric, none, step))
        stream_ms = ms(lambda: exact_stream(loaded, other, clean, metric, none, step))
        per_head = heads_ms / (arch.num_layers * arch.num_heads)
        per_cell = stream_ms / (arch.num_layers * seq)
        cells.append(
            f"{heads_ms / 1000:>8.1f} s {per_head:>6.1f} {stream_ms / 1000:>8.1f} s {per_cell:>6.1f}"
        )
    print(" ".join(cells))


def run(repeats: int) -> None:
    app = create_app(Settings(preload=[]))
    loaded = app.state.manager.get(SMOLLM2_ID)
    print(f"SmolLM2-135M; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"medians of {repeats}; ratios against one pass of the with-head model")  # fmt: skip
    print(
        f"{'tokens':>6} {'pass ms':>8} {'lens ms':>9} {'ratio':>6} {'lens@1 ms':>9} {'ratio':>6} "
        f"{'attrib ms':>9} {'ratio':>6} "
        f"{'patch ms':>9} {'ratio':>6} {'exact heads':>10} {'ms/head':>6} {'exact stream':>10} "
        f"{'ms/cell':>6}"
    )
    for n in LENGTHS:
        measure(loaded, n, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    run(parser.parse_args().repeats)


if __name__ == "__main__":
    main()
