"""Bounded load test against a real server on 127.0.0.1.

    .venv/bin/python -m bench.load_test [--clients 20] [--seconds 60]

Starts uvicorn (rate limit off), warms the default models, then runs N client threads for a
fixed time, each sending a mix of cached requests (a small pool of sentences) and uncached
ones (a sentence never seen before), over both embedded models. Prints throughput, latency
percentiles, errors, and the server's resident memory before and after, next to the cache
bounds. Exits non-zero if any request failed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
POOL = [
    "The animal didn't cross the street because it was too tired.",
    "Attention lets every token look at every other token.",
    "The keys and values come from the encoder.",
    "Sparse attention makes long documents affordable.",
    "A previous-token head copies what came just before.",
]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(conn: http.client.HTTPConnection, body: dict) -> int:
    conn.request("POST", "/api/attention", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status


def pick(rng: random.Random, counter: list[int]) -> tuple[dict, str]:
    """A request and its kind: 60 % cached MiniLM, 25 % uncached MiniLM, 15 % SmolLM2."""
    roll = rng.random()
    if roll < 0.60:
        return {"model": MINILM, "text": rng.choice(POOL), "format": "u8"}, "cached"
    counter[0] += 1
    unique = f"Request number {counter[0]} from {threading.current_thread().name} says hello."
    if roll < 0.85:
        return {"model": MINILM, "text": unique, "layers": [rng.randrange(6)]}, "uncached"
    return {
        "model": SMOLLM2,
        "text": unique,
        "format": "u8",
        "layers": [rng.randrange(30)],
    }, "uncached"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()

    port = free_port()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "ATLAS_RATE_LIMIT_PER_MINUTE": "0",
        "ATLAS_PRELOAD": "[]",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/api/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        warm = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for text in POOL:
            assert request(warm, {"model": MINILM, "text": text, "format": "u8"}) == 200
        assert request(warm, {"model": SMOLLM2, "text": "warm up", "layers": [0]}) == 200
        before = rss_mb(server.pid)

        latencies: dict[str, list[float]] = {"cached": [], "uncached": []}
        errors: list[str] = []
        stop_at = time.monotonic() + args.seconds
        lock = threading.Lock()

        def client(seed: int) -> None:
            rng = random.Random(seed)
            counter = [0]
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            while time.monotonic() < stop_at:
                body, kind = pick(rng, counter)
                start = time.perf_counter()
                try:
                    status = request(conn, body)
                except (OSError, http.client.HTTPException) as err:
                    status = repr(err)
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                elapsed = time.perf_counter() - start
                with lock:
                    if status == 200:
                        latencies[kind].append(elapsed)
                    else:
                        errors.append(f"{kind}: {status}")

        threads = [
            threading.Thread(target=client, args=(i,), name=f"client{i}")
            for i in range(args.clients)
        ]
        began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - began
        after = rss_mb(server.pid)

        everything = latencies["cached"] + latencies["uncached"]
        print(
            f"{args.clients} clients for {wall:.1f} s against 127.0.0.1: {len(everything)} requests, "
            f"{len(errors)} errors, {len(everything) / wall:.1f} requests/s"
        )
        for kind in ("cached", "uncached"):
            values = sorted(latencies[kind])
            if values:
                p50 = statistics.median(values) * 1000
                p99 = values[min(len(values) - 1, int(0.99 * len(values)))] * 1000
                print(
                    f"  {kind:<9} {len(values):>6} requests   p50 {p50:8.1f} ms   p99 {p99:8.1f} ms"
                )
        print(
            f"  server RSS: {before:.0f} MB after warm-up, {after:.0f} MB after the run "
            f"(forward cache bound: 32 entries / 512 MiB; 2 models loaded)"
        )
        if errors:
            print("  first errors:", errors[:5])
        return 1 if errors else 0
    finally:
        server.terminate()
        server.wait(timeout=15)


if __name__ == "__main__":
    raise SystemExit(main())
