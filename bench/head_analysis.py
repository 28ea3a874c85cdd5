"""How long the head analyses take on a real cached forward pass (SmolLM2, 270 heads).

    .venv/bin/python -m bench.head_analysis [--tokens 512]

Prints, side by side for one text: the forward pass, the statistics and roles of every head
(attention_core.head_stats), attention rollout, and the head-similarity matrix.
"""

from __future__ import annotations

import argparse
import statistics
import time

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.forward import run_forward
from atlas_engine.inference.tokens import token_facts
from atlas_engine.models.registry import SMOLLM2_ID
from attention_core.aggregate import attention_rollout, head_similarity
from attention_core.head_stats import head_statistics


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    app = create_app(Settings(preload=[], rate_limit_per_minute=0))
    loaded = app.state.manager.get(SMOLLM2_ID)
    text = " ".join(["attention"] * (args.tokens - 2)) + " end"
    forward_ms, result = timed(lambda: run_forward(loaded, text), repeat=1)
    facts = token_facts(loaded, result)
    maps = result.all_maps()  # (30, 9, T, T)
    print(f"SmolLM2, {result.seq_len} tokens, {maps.shape[0] * maps.shape[1]} heads (medians of 3)")
    print(f"  forward pass with attention output   {forward_ms:9.1f} ms")
    ms, stats = timed(lambda: head_statistics(maps, facts, causal=True))
    print(f"  statistics and roles of every head   {ms:9.1f} ms")
    ms, _ = timed(lambda: attention_rollout(maps))
    print(f"  attention rollout, all layers        {ms:9.1f} ms")
    ms, _ = timed(lambda: head_similarity(maps), repeat=1)
    print(f"  head similarity (270 x 270)          {ms:9.1f} ms")
    roles = sum(bool(stats.roles(layer, h)) for layer in range(30) for h in range(9))
    print(f"  heads with at least one role: {roles} of 270")


if __name__ == "__main__":
    main()
