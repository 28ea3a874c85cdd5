"""What an ablation or comparison answer costs against the model's bare forward pass, side by side.

    .venv/bin/python -m bench.interventions [--repeats N]

For MiniLM and SmolLM2 on README prose of 128 tokens: the model's forward pass with attention
output (with its LM head where it has one, as transformers runs it), then the work of
POST /api/attention/ablate with the unablated pass not yet cached (two forward passes and the
LM head over both runs) and cached (one), and the predictions answer (a forward pass and the
LM head over every position), and POST /api/attention/compare of the same head on two texts
that differ in one word, new (two forward passes) and cached. Each figure is the median of
--repeats runs in this process.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.forward import run_forward
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID, build_registry
from atlas_engine.schemas.ablation import AblationRequest, HeadRef
from atlas_engine.schemas.compare import CompareRequest, OtherSide
from atlas_engine.schemas.predictions import PredictionsRequest
from atlas_engine.services.ablation import ablate
from atlas_engine.services.compare import compare
from atlas_engine.services.passes import Passes
from atlas_engine.services.predictions import predictions
from bench.compression import prose


def median_ms(work, repeats: int, before=None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(manager: ModelManager, model_id: str, tokens: int, repeats: int) -> str:
    """One printed row: the forward pass, ablation new and cached, predictions new."""
    loaded = manager.get(model_id)
    budget = AnswerBudget(4 * 2**30, 10)
    text = prose(loaded.tokenizer, tokens)
    n = len(loaded.tokenizer(text)["input_ids"])
    passes = [Passes(manager, ForwardCache(8, 2**31), budget)]

    def fresh_cache() -> None:
        passes[0] = Passes(manager, ForwardCache(8, 2**31), budget)

    req = AblationRequest(
        model=model_id, text=text, heads=[HeadRef(layer=1, head=0)], layer=2, head=0
    )
    forward = median_ms(lambda: run_forward(loaded, text), repeats)
    if loaded.predictor is not None:  # the model's own forward pass includes its LM head
        inputs = {k: v for k, v in loaded.tokenizer(text, return_tensors="pt").items()
                  if k != "token_type_ids" or not loaded.causal}  # fmt: skip

        def whole() -> None:
            with torch.inference_mode():
                loaded.predictor(**inputs, output_attentions=True)

        forward = median_ms(whole, repeats)

    def answered(service, request) -> None:
        """The service's answer, its reservation released as the route does once it is sent."""
        _, reservation = service(passes[0], request)
        reservation.release()

    new = median_ms(lambda: answered(ablate, req), repeats, fresh_cache)
    answered(ablate, req)  # the unablated pass is cached from here on
    cached = median_ms(lambda: answered(ablate, req), repeats)
    first = float("nan")  # MiniLM has no LM head
    if loaded.predictor is not None:  # a new forward pass, then the head over every position
        asked = PredictionsRequest(model=model_id, text=text)
        first = median_ms(lambda: predictions(passes[0], asked), repeats, fresh_cache)
    other = text.replace(" the ", " a ", 1)  # the same head on a second, slightly other text
    pair = CompareRequest(
        model=model_id, text=text, layer=2, head=0, other=OtherSide(text=other, layer=2, head=0)
    )
    compared = median_ms(lambda: answered(compare, pair), repeats, fresh_cache)
    answered(compare, pair)
    compared_cached = median_ms(lambda: answered(compare, pair), repeats)
    name = model_id.split("/")[1][:10]
    return (
        f"{name:>10} {n:>6} {forward:>10.1f} {new:>11.1f} {new / forward:>5.2f}x "
        f"{cached:>13.1f} {cached / forward:>5.2f}x {first:>15.1f} {first / forward:>5.2f}x "
        f"{compared:>11.1f} {compared / forward:>5.2f}x "
        f"{compared_cached:>14.1f} {compared_cached / forward:>5.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    manager = ModelManager(
        build_registry([], None), cache_dir=Path("var/cache"), token_limit=512, max_loaded=2
    )
    print(f"{'model':>10} {'tokens':>6} {'forward ms':>10} {'ablate new':>11} {'ratio':>6} "
          f"{'ablate cached':>13} {'ratio':>6} {'predictions new':>15} {'ratio':>6} "
          f"{'compare new':>11} {'ratio':>6} {'compare cached':>14} {'ratio':>6}")  # fmt: skip
    for model_id in (MINILM_ID, SMOLLM2_ID):
        print(measure(manager, model_id, args.tokens, args.repeats))


if __name__ == "__main__":
    main()
