"""How long a short request waits behind a long one on the heavy lane, on a live server.

    .venv/bin/python -m bench.waiting [--tokens 8190] [--repeats 3] [--beside-corpus]

One SmolLM2 text of the whole context (8,190 tokens by default). Three kinds of long job, each
run `repeats` times, each with a new MiniLM sentence (every layer in u8) sent 1 s after it
starts: the text's forward pass (POST /api/attention/forward, a new text each time), one
layer's head statistics (POST /api/attention/heads, the pass cached) and Deep zoom's overview
of one layer's 9 heads at 32 × 32 cells (POST /api/attention/tiles, the pass cached). A long
job lets a short one in between two of its steps (atlas_engine.compute.run_beside: layers, blocks of
rows, tiles), so the sentence should wait for one step, not for the job. Printed: each job's
time and the sentence's, medians and ranges, side by side with a sentence sent to the idle
server. Last, every head's statistics over a new text (POST /api/attention/heads with no
`layers`: Deep zoom's head finder in one job, its forward pass included, a minute or more) with
a new sentence sent 10, 60 and 120 s into it: at any age of a long job a sentence should wait
at most a slice of it (atlas_engine.compute.SLICE_SECONDS), within AGE_GOAL times its idle time.
Then (alone with --beside-corpus) new sentences while the server's own corpus job (`make run`'s)
describes SmolLM2, against the same server once the job is done.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from app.main import create_app
from atlas_engine.compute import QUIET_SECONDS
from atlas_engine.config import Settings
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from bench.compression import prose
from tests.support.live import start_server

SENT_AFTER_SECONDS = 1.0
AGES_SECONDS = (10.0, 60.0, 120.0)
AGE_GOAL = 2.0  # a sentence's time beside a long job, in multiples of its time on an idle server
_sentences = iter(range(10**6))


def sentence(client: httpx.Client) -> float:
    """Seconds to a new MiniLM sentence's whole answer (every layer, u8), on `client`'s
    connection (kept alive: making a client costs more than the answer)."""
    body = {
        "model": MINILM_ID,
        "text": f"Sentence number {next(_sentences)} waits for its turn here.",
        "format": "u8",
    }
    start = time.perf_counter()
    response = client.post("/api/attention", json=body)
    response.raise_for_status()
    return time.perf_counter() - start


def beside(
    base: str, short: httpx.Client, long_job: Callable[[httpx.Client], None]
) -> tuple[float, float]:
    """(the long job's seconds, the sentence's seconds) with the sentence sent
    SENT_AFTER_SECONDS into the long job."""
    took: dict[str, float] = {}

    def run_long() -> None:
        with httpx.Client(base_url=base, timeout=600) as client:
            start = time.perf_counter()
            long_job(client)
            took["long"] = time.perf_counter() - start

    thread = threading.Thread(target=run_long)
    thread.start()
    time.sleep(SENT_AFTER_SECONDS)
    waited = sentence(short)
    thread.join()
    return took["long"], waited


def at_ages(
    base: str, short: httpx.Client, long_job: Callable[[httpx.Client], None], idle: float
) -> None:
    """A new sentence sent AGES_SECONDS into `long_job`, each timed against `idle` seconds."""
    ended: dict[str, float] = {}
    start = time.perf_counter()

    def run_long() -> None:
        with httpx.Client(base_url=base, timeout=900) as client:
            long_job(client)
        ended["at"] = time.perf_counter() - start

    thread = threading.Thread(target=run_long)
    thread.start()
    print("\nA new MiniLM sentence sent into every head's statistics of a new text (no layers):")
    print(f"{'sent at, s':<12} {'the job then':<14} {'the sentence, ms':>18} {'× idle':>8}")
    worst = 0.0
    for age in AGES_SECONDS:
        time.sleep(max(0.0, start + age - time.perf_counter()))
        running = "running" if "at" not in ended else "ended"
        waited = sentence(short)
        worst = max(worst, waited / idle) if running == "running" else worst
        print(f"{age:<12g} {running:<14} {waited * 1000:>18,.0f} {waited / idle:>8.1f}")
    thread.join()
    goal = "met" if worst <= AGE_GOAL else "MISSED"
    print(
        f"the job took {ended['at']:.1f} s; while it ran, the worst was {worst:.1f}× idle "
        f"(goal <= {AGE_GOAL:g}×: {goal})"
    )


def posted(path: str, body: dict) -> Callable[[httpx.Client], None]:
    def job(client: httpx.Client) -> None:
        client.post(path, json=body).raise_for_status()

    return job


def summary(values: list[float], unit: float, digits: int) -> str:
    low, high = min(values) * unit, max(values) * unit
    return f"{statistics.median(values) * unit:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


def run(tokens: int, repeats: int, ages_only: bool = False) -> None:
    app = create_app(Settings(preload=[]))
    tokenizer = app.state.manager.get(SMOLLM2_ID).tokenizer
    texts = [prose(tokenizer, tokens, start=7919 * (i + 1)) for i in range(repeats)]
    with tempfile.TemporaryDirectory() as tmp:
        preload = {"ATLAS_PRELOAD": json.dumps([MINILM_ID, SMOLLM2_ID])}
        server = start_server(Path(tmp) / "server.log", preload)
        try:
            short = httpx.Client(base_url=server.base, timeout=120)
            sentence(short)  # MiniLM's first answer
            warm = {"model": SMOLLM2_ID, "text": "warm up", "format": "u8"}  # loaded by now
            short.post("/api/attention", json=warm, timeout=600).raise_for_status()
            idle = [sentence(short) for _ in range(5)]
            jobs = {
                "forward pass": [
                    posted("/api/attention/forward", {"model": SMOLLM2_ID, "text": text})
                    for text in texts
                ],  # each a new text: every one is a whole pass; the last stays cached
                "one layer's head statistics": [
                    posted(
                        "/api/attention/heads",
                        {"model": SMOLLM2_ID, "text": texts[-1], "layers": [4 + i]},
                    )
                    for i in range(repeats)
                ],
                "overview of 9 heads": [
                    posted(
                        "/api/attention/tiles",
                        {"model": SMOLLM2_ID, "text": texts[-1], "layer": 4 + i, "cell": 32},
                    )
                    for i in range(repeats)
                ],
            }
            print(
                f"A new MiniLM sentence (every layer, u8) sent {SENT_AFTER_SECONDS:g} s into a "
                f"long SmolLM2 job on {tokens:,} tokens; medians (ranges) of {repeats}."
            )
            print(f"{'long job':<28} {'its time, s':>22} {'the sentence, ms':>24}")
            print(f"{'none (the server idle)':<28} {'':>22} {summary(idle, 1000, 0):>24}")
            for name, runs in ({} if ages_only else jobs).items():
                measured = [beside(server.base, short, job) for job in runs]
                longs, shorts = [m[0] for m in measured], [m[1] for m in measured]
                print(f"{name:<28} {summary(longs, 1, 2):>22} {summary(shorts, 1000, 0):>24}")
            text = prose(tokenizer, tokens, start=104729)  # not cached: its pass comes first
            head_finder = posted("/api/attention/heads", {"model": SMOLLM2_ID, "text": text})
            at_ages(server.base, short, head_finder, statistics.median(idle))
        finally:
            server.stop()


def beside_corpus(sentences: int) -> None:
    """New MiniLM sentences while the server's own corpus job (make run's) describes SmolLM2
    over python-docs, against the same server once the job is done: the job is the heavy lane's
    last work, so a sentence should wait at most one layer of one text (AGE_GOAL × idle).
    Sentences come QUIET_SECONDS + 0.5 s apart, so that the job has started a text again each
    time one arrives (closer ones keep the job waiting and would measure nothing)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "ATLAS_PRELOAD": json.dumps([MINILM_ID]),
            "ATLAS_CORPUS_TEXTS": "60",
            "ATLAS_CORPUS_MODELS": json.dumps([SMOLLM2_ID]),
            "ATLAS_CORPUS_STORE": str(Path(tmp) / "corpus.sqlite"),
        }
        server = start_server(Path(tmp) / "server.log", env)
        try:
            short = httpx.Client(base_url=server.base, timeout=120)
            sentence(short)  # MiniLM's first answer

            def job() -> dict:
                return short.get("/api/corpus").json()["background"][0]

            while job()["state"] != "running" or job()["done"] < 2:
                time.sleep(0.5)
            during = []
            for _ in range(sentences):
                # past the job's quiet second, so each sentence arrives while a text runs
                time.sleep(QUIET_SECONDS + 0.5)
                during.append(sentence(short))
            if job()["state"] != "running":
                print("the corpus job ended before the sentences did: ask for more texts")
                return
            while job()["state"] == "running":
                time.sleep(1)
            idle = [sentence(short) for _ in range(sentences)]
            ratio = statistics.median(during) / statistics.median(idle)
            print(
                f"\nA new MiniLM sentence beside the server's corpus job on SmolLM2 ({sentences} each):"
            )
            print(f"{'the server':<34} {'the sentence, ms':>24}")
            print(f"{'describing the corpus':<34} {summary(during, 1000, 0):>24}")
            print(f"{'idle (the job done)':<34} {summary(idle, 1000, 0):>24}")
            goal = "met" if ratio <= AGE_GOAL else "MISSED"
            print(f"median beside the job: {ratio:.1f}× idle (goal <= {AGE_GOAL:g}×: {goal})")
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8190)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--ages-only", action="store_true", help="only the sentences at 10/60/120 s"
    )
    parser.add_argument(
        "--beside-corpus", action="store_true", help="only sentences beside the corpus job"
    )
    args = parser.parse_args()
    if not args.beside_corpus:
        run(args.tokens, args.repeats, args.ages_only)
    beside_corpus(sentences=12)
