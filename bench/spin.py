"""libgomp's idle spin: its own against a tenth of it, measured in one run.

    .venv/bin/python -m bench.spin [--repeats N]

When a parallel region ends, libgomp's helper threads spin GOMP_SPINCOUNT iterations (300,000
by default) before they sleep: on this machine 7-10 ms of one of its two cores after every
forward pass, while the server codes and sends the answer. Does a shorter spin make answers
faster? For each GOMP_SPINCOUNT, in a new process: a MiniLM forward pass 100 ms and 5 ms after
the one before, and the CPU its idle OpenMP helpers burn in the 100 ms after it; then a live
server started as `make run` starts it, asked for new MiniLM texts (every layer in u8) 3 ms
and 500 ms after its last answer, and for each one again right after it (cached, answered while
the helpers of the pass before may still spin).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.forward import tokenize
from atlas_engine.models.registry import MINILM_ID
from bench.attention_api import Client
from bench.compression import prose
from tests.support.live import start_server

SPINS = {"300000 (libgomp's)": 300_000, "30000": 30_000}
LIBGOMP_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # set in each child alone
LENGTHS = (16, 128)
PAUSES = {"idle": 0.1, "warm": 0.005}
"""Seconds before an in-process pass, in this order: 100 ms (this VM lets a core sleep), then
5 ms (the cores still awake from the pass before)."""
CLIENT_PAUSES = (0.003, 0.5)
"""Seconds a client waits after an answer before it sends a new text."""


def helpers_cpu_ms() -> float:
    """CPU time so far of every thread of this process but the calling one (OpenMP's helpers)."""
    me, total = threading.get_native_id(), 0
    for task in os.listdir("/proc/self/task"):
        if int(task) != me:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])  # nanoseconds on a CPU
    return total / 1e6


def in_process(repeats: int) -> None:
    """In this process (its spin as given): per length, the median pass after each of PAUSES and
    the helpers' CPU in the 100 ms after the last, printed as one JSON line."""
    loaded = create_app(Settings(preload=[])).state.manager.get(MINILM_ID)
    found = {}
    for n in LENGTHS:
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
            before = helpers_cpu_ms()
            time.sleep(0.1)
            spun.append(helpers_cpu_ms() - before)
        found[n] = [statistics.median(passes[name]) for name in PAUSES] + [statistics.median(spun)]
    print(json.dumps(found))


def over_http(spin: int, repeats: int, tokenizer) -> dict[tuple[int, float], tuple[float, float]]:
    """(tokens, client pause) -> (median new answer ms, median cached answer right after it) from
    a live server with this spin."""
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            Path(tmp) / "server.log",
            {"ATLAS_PRELOAD": json.dumps([MINILM_ID]), "GOMP_SPINCOUNT": str(spin)},
        )
        try:
            client = Client(server.base)
            client.post({"model": MINILM_ID, "text": "warm up", "format": "u8"})
            for n in LENGTHS:
                for k, pause in enumerate(CLIENT_PAUSES):
                    new, cached = [], []
                    for i in range(repeats):
                        text = prose(tokenizer, n + 2, start=97 * (1000 * n + 100 * k + i))
                        body = {"model": MINILM_ID, "text": text, "format": "u8"}
                        time.sleep(pause)
                        new.append(client.post(body)[0])
                        cached.append(client.post(body)[0])
                    found[n, pause] = (statistics.median(new), statistics.median(cached))
        finally:
            server.stop()
    return found


def run(repeats: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in LIBGOMP_SETTINGS}
    rows = {}
    for label, spin in SPINS.items():
        child = [sys.executable, "-m", "bench.spin", "--in-process", "--repeats", str(repeats)]
        done = subprocess.run(
            child, env={**env, "GOMP_SPINCOUNT": str(spin)}, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        rows[label] = json.loads(done.stdout.splitlines()[-1])
    print(
        "A MiniLM pass in one process, 100 ms and 5 ms after the one before, and the CPU its "
        f"idle helpers burn in the 100 ms after it (medians of {repeats}):"
    )
    print(
        f"{'GOMP_SPINCOUNT':<22} {'tokens':>6} {'pass, 100 ms on':>16} {'5 ms on':>9} "
        f"{'helpers spin after':>19}"
    )
    for label, found in rows.items():
        for tokens, (idle, warm, spun) in found.items():
            print(f"{label:<22} {tokens:>6} {idle:>14.1f}ms {warm:>7.1f}ms {spun:>17.1f}ms")

    tokenizer = create_app(Settings(preload=[])).state.manager.get(MINILM_ID).tokenizer
    print(
        "\nA live server: a new text's answer (every layer, u8) sent 3 ms and 500 ms after the "
        f"last answer, then the same again (cached); medians of {repeats}, ms:"
    )
    print(f"{'GOMP_SPINCOUNT':<22} {'tokens':>6} {'3 ms: new':>10} {'cached':>7} "
          f"{'500 ms: new':>12} {'cached':>7}")  # fmt: skip
    for label, spin in SPINS.items():
        found = over_http(spin, repeats, tokenizer)
        for n in LENGTHS:
            soon, later = (found[n, pause] for pause in CLIENT_PAUSES)
            print(
                f"{label:<22} {n:>6} {soon[0]:>10.1f} {soon[1]:>7.1f} {later[0]:>12.1f} "
                f"{later[1]:>7.1f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=19)
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.in_process:
        in_process(options.repeats)
    else:
        run(options.repeats)
