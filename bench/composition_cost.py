"""What the composition scores of every pair of heads cost, from the weights alone, on SmolLM2
(30 layers × 9 heads, GQA with 3 key/value heads a layer, d = 576, hd = 64).

    .venv/bin/python -m bench.composition_cost [--repeats N]

Timed separately, medians of N (the baseline's cache is cleared each time):
- weights: each layer's W_Q, W_K, W_V replayed on 577 basis rows, and W_O (head_weights);
- scores: Q-, K- and V-composition of all 81 · (30 · 29 / 2) = 35,235 earlier→later pairs
  (attention_core.composition: d × d Grams once per head, float32 inner products);
- baseline: the mean score of 32 pairs of Gaussian random heads of the same shapes;
and, once, the float32 scores against float64 ones (largest relative difference), and against
the d × d definition on a few pairs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.inference.head_weights import head_weights
from atlas_engine.models.registry import SMOLLM2_ID
from attention_core.composition import KINDS, composition_scores, direct_scores, random_baseline


def seconds(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(repeats: int) -> None:
    app = create_app(Settings(preload=[]))
    loaded = app.state.manager.get(SMOLLM2_ID)
    print(f"SmolLM2-135M; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"medians of {repeats}")  # fmt: skip
    times: dict[str, list[float]] = {"weights": [], "scores": [], "baseline": []}
    for _ in range(repeats):
        took, weights = seconds(lambda: head_weights(loaded))
        times["weights"].append(took)
        factors = (weights.w_q, weights.w_k, weights.w_v, weights.w_o)
        took, found = seconds(lambda: composition_scores(*factors))  # noqa: B023
        times["scores"].append(took)
        random_baseline.cache_clear()
        d, hd, hdv = factors[0].shape[-1], factors[0].shape[-2], factors[2].shape[-2]
        took, baseline = seconds(lambda: random_baseline(d, hd, hdv))  # noqa: B023
        times["baseline"].append(took)
    for name, values in times.items():
        print(f"{name:>9}: {statistics.median(values):6.2f} s (all: "
              f"{', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    exact = composition_scores(*factors, dtype=torch.float64)
    for kind in KINDS:
        fast, slow = found.scores[kind], exact.scores[kind]
        rel = float(((fast.double() - slow.double()).abs() / slow.double()).nan_to_num(0).max())
        finite = fast[fast.isfinite()]
        print(f"{kind}-comp: baseline {baseline[kind]:.4f}, mean {float(finite.mean()):.4f}, "
              f"max {float(finite.max()):.4f}, float32 vs float64 max rel {rel:.1e}")  # fmt: skip
    worst = 0.0
    for earlier, later in (((0, 0), (1, 0)), ((3, 4), (20, 8)), ((28, 2), (29, 5))):
        want = direct_scores(*factors, earlier, later)
        for kind in KINDS:
            got = float(found.scores[kind][(*earlier, *later)])
            worst = max(worst, abs(got - want[kind]) / want[kind])
    print(f"against the d × d definition on 3 pairs: max rel {worst:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    run(parser.parse_args().repeats)


if __name__ == "__main__":
    main()
