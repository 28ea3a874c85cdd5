"""Time and memory against tokens, with the fitted exponent: attention_core's exact attention
(every stage kept) against its tiled attention (online softmax), measured side by side.

    .venv/bin/python -m bench.scaling

Each (variant, length) runs in a fresh process, so its memory figure is the peak resident set
the call added (the high-water mark after the call minus before it). The exponent is the slope
of log(time) or log(memory) against log(tokens) over the lengths measured: 2 is quadratic,
1 linear. 8 heads of width 64, causal, float32, the CPU.
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time

HEADS, HEAD_DIM, BLOCK = 8, 64, 256
LENGTHS = (512, 1024, 2048, 4096, 8192)


def measure(variant: str, n: int) -> dict:
    """In this process: one call's seconds and the resident memory it added (MB)."""
    import torch

    from attention_core import scaled_dot_product_attention, tiled_attention

    torch.manual_seed(0)
    run = {
        "exact": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal=True).output,
        "tiled": lambda q, k, v: (
            tiled_attention(q, k, v, causal=True, block_q=BLOCK, block_k=BLOCK).output
        ),
    }[variant]
    small = torch.randn(1, HEADS, 64, HEAD_DIM)
    run(small, small, small)  # the first call's one-time costs (thread pools) are not the length's
    q, k, v = (torch.randn(1, HEADS, n, HEAD_DIM) for _ in range(3))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    out = run(q, k, v)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert out.shape == q.shape
    return {"seconds": seconds, "mb": (after - before) / 1024}


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def main() -> None:
    if len(sys.argv) == 3:  # a child: measure one point, print it as JSON
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
        return
    results = {}
    print(f"{'tokens':>6} {'exact ms':>9} {'exact MB':>9} {'tiled ms':>9} {'tiled MB':>9}")
    for n in LENGTHS:
        for variant in ("exact", "tiled"):
            child = subprocess.run(
                [sys.executable, "-m", "bench.scaling", variant, str(n)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            results[variant, n] = json.loads(child.stdout.strip().splitlines()[-1])
        e, t = results["exact", n], results["tiled", n]
        print(f"{n:>6} {e['seconds'] * 1000:>9.1f} {e['mb']:>9.1f} "
              f"{t['seconds'] * 1000:>9.1f} {t['mb']:>9.1f}", flush=True)  # fmt: skip
    for variant in ("exact", "tiled"):
        times = [results[variant, n]["seconds"] for n in LENGTHS]
        memory = [results[variant, n]["mb"] for n in LENGTHS]
        print(f"{variant}: time ~ n^{slope(list(LENGTHS), times):.2f}, "
              f"memory ~ n^{slope(list(LENGTHS), memory):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
