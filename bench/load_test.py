"""Bounded load test against a real server on 127.0.0.1.

    .venv/bin/python -m bench.load_test [--clients 20] [--seconds 60] [--url http://127.0.0.1:8080]

Without --url it starts its own server (`python -m app`, rate limit off), warms both embedded
models, and samples the server's resident memory through the run against the stated bound
(app.memory.worst_case_rss). With --url it loads a server already running (for example
replicas behind a reverse proxy) and reports throughput and latency only.

Each of N client threads sends, for a fixed time, a mix of cached requests (a small pool of
sentences) and uncached ones (a sentence never seen before) over both embedded models. Prints
throughput, latency percentiles and errors. Exits non-zero if any request failed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.memory import worst_case_rss  # noqa: E402
from atlas_engine.config import Settings  # noqa: E402
from tests.support.live import rss_bytes, start_server  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
MiB = 2**20
KINDS = ("cached", "new MiniLM", "new SmolLM2")
POOL = [
    "The animal didn't cross the street because it was too tired.",
    "Attention lets every token look at every other token.",
    "The keys and values come from the encoder.",
    "Sparse attention makes long documents affordable.",
    "A previous-token head copies what came just before.",
]


def request(conn: http.client.HTTPConnection, body: dict) -> int:
    conn.request("POST", "/api/attention", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status


def pick(rng: random.Random, counter: list[int], name: str) -> tuple[dict, str]:
    """A request and its kind: 60 % cached MiniLM, 25 % uncached MiniLM, 15 % SmolLM2."""
    roll = rng.random()
    if roll < 0.60:
        return {"model": MINILM, "text": rng.choice(POOL), "format": "u8"}, "cached"
    counter[0] += 1
    unique = f"Request number {counter[0]} from {name} at {time.time_ns()} says hello."
    if roll < 0.85:
        return {"model": MINILM, "text": unique, "layers": [rng.randrange(6)]}, "new MiniLM"
    return {
        "model": SMOLLM2,
        "text": unique,
        "format": "u8",
        "layers": [rng.randrange(30)],
    }, "new SmolLM2"


@dataclass
class LoadResult:
    wall: float
    latencies: dict[str, list[float]] = field(default_factory=lambda: {kind: [] for kind in KINDS})
    errors: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def percentiles(self, kind: str | None = None) -> tuple[float, float]:
        """(p50, p99) in ms over one kind of request, or all."""
        values = sorted(
            self.latencies[kind]
            if kind
            else [v for values in self.latencies.values() for v in values]
        )
        if not values:
            return float("nan"), float("nan")
        return statistics.median(values) * 1000, values[int(0.99 * (len(values) - 1))] * 1000

    def report(self, label: str, clients: int) -> str:
        p50, p99 = self.percentiles()
        lines = [
            f"{label}: {clients} clients for {self.wall:.1f} s: {self.count} requests, "
            f"{len(self.errors)} errors, {self.count / self.wall:.1f} requests/s, "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"
        ]
        for kind in KINDS:
            p50, p99 = self.percentiles(kind)
            lines.append(
                f"  {kind:<11} {len(self.latencies[kind]):>6} requests   p50 {p50:8.1f} ms   "
                f"p99 {p99:8.1f} ms"
            )
        if self.errors:
            lines.append(f"  first errors: {self.errors[:5]}")
        return "\n".join(lines)


def warm(base: str) -> None:
    parsed = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=180)
    for text in POOL:
        assert request(conn, {"model": MINILM, "text": text, "format": "u8"}) == 200
    assert request(conn, {"model": SMOLLM2, "text": "warm up", "layers": [0]}) == 200
    conn.close()


def run_load(base: str, clients: int, seconds: float) -> LoadResult:
    """N client threads, each on its own keep-alive connection, for `seconds`."""
    parsed = urllib.parse.urlparse(base)
    result = LoadResult(wall=0.0)
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        counter = [0]
        connect = lambda: http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=180)  # noqa: E731
        conn = connect()
        while time.monotonic() < stop_at:
            body, kind = pick(rng, counter, f"client{seed}")
            start = time.perf_counter()
            try:
                status = request(conn, body)
            except (OSError, http.client.HTTPException) as err:
                status = repr(err)
                conn = connect()
            elapsed = time.perf_counter() - start
            with lock:
                if status == 200:
                    result.latencies[kind].append(elapsed)
                else:
                    result.errors.append(f"{kind}: {status}")
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.wall = time.monotonic() - began
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--url", help="load this running server instead of starting one")
    args = parser.parse_args()

    if args.url:
        warm(args.url)
        result = run_load(args.url, args.clients, args.seconds)
        print(result.report(args.url, args.clients))
        return 1 if result.errors else 0

    log = Path(REPO / "var" / "load-test-server.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    server = start_server(log, {"ATLAS_LOG_LEVEL": "warning"})
    try:
        warm(server.base)
        ready = rss_bytes(server.process.pid)
        defaults = Settings()
        bound = worst_case_rss(ready, defaults.forward_cache_bytes, defaults.inflight_bytes)
        peak = ready
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_bytes(server.process.pid))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        result = run_load(server.base, args.clients, args.seconds)
        done.set()
        sampler.join()
        print(result.report("one server on 127.0.0.1", args.clients))
        print(
            f"  server RSS: {ready / MiB:.0f} MB with both models loaded, peak {peak / MiB:.0f} MB "
            f"during the run; stated bound {bound / MiB:.0f} MB = {ready / MiB:.0f} (models) + "
            f"{defaults.forward_cache_bytes / MiB:.0f} (forward cache) + "
            f"{defaults.inflight_bytes / MiB:.0f} (answers in flight) + 128 (working margin)"
            f" -> {'within' if peak <= bound else 'OVER'} the bound"
        )
        return 1 if result.errors or peak > bound else 0
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
