"""Why the server runs its tensor work on its own compute lanes (app.compute), measured in one
run.

    .venv/bin/python -m bench.threads [--repeats N]

The same kernels timed on one thread, then again after a second thread has run PyTorch too
(OpenMP then keeps a team of threads for each), then again once that thread has ended: a small
softmax, a (16, 384) x (384, 384) product, and a replay of every layer of a 16-token MiniLM
pass (what a new text's answer used to cost besides its forward pass). Then, in a new process
for each setting, libgomp's spin: what a MiniLM forward pass costs
100 ms and 5 ms after the one before, and how much CPU its idle helper threads burn in the
100 ms after it, with libgomp's own spin and with the server's (app.openmp).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

from app.config import Settings
from app.inference.forward import run_forward
from app.main import create_app
from app.models.registry import MINILM_ID
from app.openmp import OPERATOR_SETTINGS, SPIN_COUNT


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


def other_threads_cpu_ms() -> float:
    """CPU time so far of every thread of this process but the calling one (OpenMP's helpers)."""
    me, total = threading.get_native_id(), 0
    for task in os.listdir("/proc/self/task"):
        if int(task) != me:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])  # nanoseconds on a CPU
    return total / 1e6


PAUSES = {"idle": 0.1, "warm": 0.005}
"""Seconds before a pass, in this order: 100 ms (this VM lets a core sleep) and 5 ms (the cores
still awake from the pass before)."""


def spin_child(repeats: int) -> None:
    """In this process (its GOMP_SPINCOUNT as given): for 16 and 128 tokens, the median forward
    pass 100 ms after the one before and 5 ms after it, and the helpers' CPU in the 100 ms after
    a pass, printed as JSON."""
    from app.inference.forward import tokenize
    from bench.compression import prose

    loaded = create_app(Settings(preload=[])).state.manager.get(MINILM_ID)
    found = {}
    for n in (16, 128):
        passes: dict[str, list[float]] = {name: [] for name in PAUSES}
        spun = []
        for i in range(repeats):
            inputs, _ = tokenize(loaded, prose(loaded.tokenizer, n + 2, start=97 * i), None)
            for name, pause in PAUSES.items():
                time.sleep(pause)
                with torch.inference_mode():
                    start = time.perf_counter()
                    loaded.model(**inputs, output_attentions=True)
                    passes[name].append((time.perf_counter() - start) * 1000)
            before = other_threads_cpu_ms()
            time.sleep(0.1)
            spun.append(other_threads_cpu_ms() - before)
        found[n] = [statistics.median(passes[name]) for name in PAUSES] + [statistics.median(spun)]
    print(json.dumps(found))


def compare_spins(repeats: int) -> None:
    """spin_child under libgomp's default spin and the server's, each in a new process."""
    print(
        "\nlibgomp's spin: a MiniLM pass 100 ms and 5 ms after the one before, and the CPU its "
        f"idle helpers burn in the 100 ms after it (medians of {repeats}):"
    )
    print(
        f"{'GOMP_SPINCOUNT':<22} {'tokens':>6} {'pass, 100 ms on':>16} {'5 ms on':>9} "
        f"{'helpers spin after':>19}"
    )
    settings = {"300000 (libgomp's)": None, f"{SPIN_COUNT} (the server's)": str(SPIN_COUNT)}
    for label, count in settings.items():
        env = {k: v for k, v in os.environ.items() if k not in OPERATOR_SETTINGS}
        if count is not None:
            env["GOMP_SPINCOUNT"] = count
        child = [sys.executable, "-m", "bench.threads", "--spin-child", "--repeats", str(repeats)]
        done = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
        for tokens, (idle, warm, spun) in json.loads(done.stdout.splitlines()[-1]).items():
            print(f"{label:<22} {tokens:>6} {idle:>14.1f}ms {warm:>7.1f}ms {spun:>17.1f}ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--spin-child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.spin_child:
        spin_child(options.repeats)
    else:
        run(options.repeats)
        compare_spins(2 * options.repeats + 1)
