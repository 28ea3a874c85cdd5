"""Why the server runs its tensor work on its own compute lanes (atlas_engine.compute), measured in one
run.

    .venv/bin/python -m bench.threads [--repeats N]

The same kernels timed on one thread, then again after a second thread has run PyTorch too
(OpenMP then keeps a team of threads for each), then again once that thread has ended: a small
softmax, a (16, 384) x (384, 384) product, and a replay of every layer of a 16-token MiniLM
pass (what a new text's answer used to cost besides its forward pass).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.forward import run_forward
from atlas_engine.models.registry import MINILM_ID


def per_call_us(fn, calls: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def run(repeats: int) -> None:
    loaded = create_app(Settings(preload=[])).state.manager.get(MINILM_ID)
    result = run_forward(loaded, "the quick brown fox jumps over a lazy dog while the stars watch")
    x = torch.randn(16, 16)
    h, w = torch.randn(16, 384), torch.randn(384, 384)
    kernels = {
        "softmax (16 x 16)": (lambda: torch.softmax(x, -1), 200),
        "matmul (16x384 @ 384x384)": (lambda: h @ w, 200),
        f"replay of {result.num_layers} layers, {result.seq_len} tokens": (
            lambda: [result.layer_maps(i) for i in range(result.num_layers)],
            10,
        ),
    }

    def measure() -> dict[str, float]:
        return {name: per_call_us(fn, calls, repeats) for name, (fn, calls) in kernels.items()}

    alone = measure()
    second_alive = threading.Event()
    stop = threading.Event()

    def idle_after_torch() -> None:
        """Run one parallel kernel, then wait without touching torch again."""
        torch.softmax(torch.randn(256, 256), -1)
        second_alive.set()
        stop.wait()

    idler = threading.Thread(target=idle_after_torch)
    idler.start()
    second_alive.wait()
    with_second = measure()
    stop.set()
    idler.join()
    after = measure()
    print(
        f"{'kernel':<34} {'one thread':>12} {'2nd thread idle':>16} {'ratio':>6} {'after it ends':>14}"
    )
    for name in kernels:
        print(
            f"{name:<34} {alone[name]:>10.1f}µs {with_second[name]:>14.1f}µs "
            f"{with_second[name] / alone[name]:>5.1f}x {after[name]:>12.1f}µs"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    run(parser.parse_args().repeats)
