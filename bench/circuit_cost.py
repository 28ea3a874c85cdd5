"""What tracing a score, one head's inputs on a text, every head's, and edge attribution
patching cost against one forward pass, side by side in one run, on SmolLM2 and MiniLM.

    .venv/bin/python -m bench.circuit_cost [--repeats N]

"One pass" is the model's own forward over the text (eager attention: what
`model(**inputs)` costs in transformers; SmolLM2 with its language-model head). Each feature is
timed as its route computes it, interleaved with the pass, medians of N:
- trace: one head's score at the last query and its strongest key taken apart
  (atlas_engine.inference.score_trace; goal: at most 2 passes), at the last layer (the most
  pieces);
- one head's inputs: its Q, K and V shares from every earlier piece (head_inputs at the last
  layer; goal: at most 3 passes);
- every head's inputs: the circuit on a text, every layer (no goal: stated);
- edges: edge attribution patching between the text and a one-token corruption (SmolLM2 only,
  which has a language-model head; goal: at most 4 passes).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.edges import edge_scores
from atlas_engine.inference.head_inputs import head_inputs
from atlas_engine.inference.patching import Metric
from atlas_engine.inference.score_trace import trace_score
from atlas_engine.models.capture import implementation
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from bench.compression import prose

LENGTHS = (16, 64)


def ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def measure(loaded, n: int, repeats: int) -> None:
    text = prose(loaded.tokenizer, n)
    inputs = loaded.tokenizer(text, return_tensors="pt")
    seq = inputs["input_ids"].shape[1]
    ids = inputs["input_ids"][0].tolist()
    swapped = [*ids[: seq // 2], ids[seq // 2 - 1], *ids[seq // 2 + 1 :]]
    corrupted = loaded.tokenizer.decode(swapped, skip_special_tokens=True)
    last_layer = loaded.arch.num_layers - 1
    decoder = loaded.predictor is not None and loaded.predicts == "next_token"
    query = seq - 1 if decoder else seq // 2

    def bare():
        with torch.inference_mode(), implementation(loaded.model, "eager"):
            (loaded.predictor or loaded.model)(**inputs)

    jobs = {
        "bare": bare,
        "trace": lambda: trace_score(loaded, text, last_layer, 0, query, max(0, query - 1)),
        "one head": lambda: head_inputs(loaded, text, [last_layer], [0]),
        "every head": lambda: head_inputs(loaded, text, list(range(loaded.arch.num_layers))),
    }
    same_length = len(loaded.tokenizer(corrupted)["input_ids"]) == seq
    if decoder and same_length:
        metric = Metric(seq - 1, 7042, 7268)
        jobs["edges"] = lambda: edge_scores(loaded, text, corrupted, metric)
    for job in jobs.values():
        job()  # first uses paid before timing
    times: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            times[name].append(ms(job))
    base = statistics.median(times["bare"])
    cells = [f"{seq:>6} {base:>8.1f}"]
    for name in ("trace", "one head", "every head", "edges"):
        if name in times:
            median = statistics.median(times[name])
            cells.append(f"{median:>9.1f} {median / base:>5.2f}x")
        else:
            cells.append(f"{'-':>9} {'-':>6}")
    print(" ".join(cells), flush=True)


def run(repeats: int) -> None:
    app = create_app(Settings(preload=[]))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {repeats}; "
          "ratios against one eager pass of the model")  # fmt: skip
    header = (
        f"{'tokens':>6} {'pass ms':>8} {'trace ms':>9} {'ratio':>6} {'1 head ms':>9} {'ratio':>6} "
        f"{'all ms':>9} {'ratio':>6} {'edges ms':>9} {'ratio':>6}"
    )
    for model in (SMOLLM2_ID, MINILM_ID):
        loaded = app.state.manager.get(model)
        print(f"{model}: {loaded.arch.num_layers} layers x {loaded.arch.num_heads} heads")
        print(header)
        for n in LENGTHS:
            measure(loaded, n, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    run(parser.parse_args().repeats)


if __name__ == "__main__":
    main()
