"""attention_core against PyTorch's kernel, and what tiling saves, side by side in one run.

    .venv/bin/python -m bench.core_kernels

For each sequence length: our traced SDPA, PyTorch's F.scaled_dot_product_attention, tiled
(online softmax) and linear attention; times are medians; "largest block" is the biggest score
matrix each holds at once per batch-head, and "max |diff|" the distance to PyTorch's output.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from attention_core import (
    causal_mask,
    linear_attention,
    scaled_dot_product_attention,
    tiled_attention,
)

HEADS, HEAD_DIM, BLOCK = 8, 64, 128


def median_ms(fn, repeats: int = 5) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    torch.manual_seed(0)
    print(
        f"{HEADS} heads, head_dim {HEAD_DIM}, causal, float32, {torch.get_num_threads()} threads; "
        f"tiled blocks {BLOCK}x{BLOCK}"
    )
    print(
        f"{'seq':>6} {'torch':>9} {'ours':>9} {'ours/torch':>10} {'tiled':>9} {'linear':>9} "
        f"{'full block':>11} {'tiled block':>11} {'saving':>7} {'max |diff|':>11}"
    )
    for n in (128, 512, 1024, 2048):
        print(row(n))


def row(n: int) -> str:
    """One line of the table for sequence length n."""
    q, k, v = (torch.randn(1, HEADS, n, HEAD_DIM) for _ in range(3))
    mask = causal_mask(n)
    with torch.inference_mode():
        reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ours = scaled_dot_product_attention(q, k, v, mask).output
        tiled = tiled_attention(q, k, v, block_q=BLOCK, block_k=BLOCK, causal=True)
        t_torch = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        t_ours = median_ms(lambda: scaled_dot_product_attention(q, k, v, mask))
        t_tiled = median_ms(
            lambda: tiled_attention(q, k, v, block_q=BLOCK, block_k=BLOCK, causal=True), 3
        )
        t_linear = median_ms(lambda: linear_attention(q, k, v, causal=True).output, 3)
    diff = max((ours - reference).abs().max().item(), (tiled.output - reference).abs().max().item())
    return (
        f"{n:>6} {t_torch:>7.1f}ms {t_ours:>7.1f}ms {t_ours / t_torch:>9.1f}x {t_tiled:>7.1f}ms "
        f"{t_linear:>7.1f}ms {tiled.cost.pairs_full:>11,} {tiled.cost.max_block_elements:>11,} "
        f"{tiled.cost.pairs_full / tiled.cost.max_block_elements:>6.0f}x {diff:>11.2e}"
    )


if __name__ == "__main__":
    main()
