"""A decoder continuing a text one token at a time, with its key/value cache.

Greedy picks the most likely token; sampling draws from softmax(logits / temperature), over
the top_k most likely tokens when top_k is set, from a generator seeded by the request, so the
same request continues the same way. Each step holds the model's lock for one forward pass,
so other requests interleave with a long generation.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from transformers import DynamicCache

from atlas_engine.models.lm_head import head_logits
from atlas_engine.models.loader import LoadedModel
from atlas_engine.models.placement import model_device

Strategy = Literal["greedy", "sample"]

CACHED_LOGITS_MAX_ABS_DIFF = 2e-4
"""A step's logits (computed with the key/value cache, one new position against the cached
keys) against a full pass over the same tokens without the cache: the same arithmetic on
matrices of other shapes, so the sums round differently (SmolLM2, measured in
docs/faithful-numbers.md; tests/atlas_engine/inference/test_generate_bounds.py)."""
CACHED_PROBABILITY_MAX_ABS_DIFF = CACHED_LOGITS_MAX_ABS_DIFF / 2
"""What that does to a probability: with every logit moved by at most m, softmax's p_i moves
by p_i · |Σ_j p_j (Δz_i − Δz_j)| ≤ 2m · p_i (1 − p_i) ≤ m / 2 (to first order in m)."""


@dataclass(frozen=True)
class Step:
    token_id: int
    probability: float  # of the chosen token, under softmax(logits) at temperature 1: the
    # step's own logits (the ones the token was chosen from, those of transformers'
    # generate(output_logits=True)), its softmax computed in float64


def next_token(
    logits: Tensor, strategy: Strategy, temperature: float, top_k: int | None, generator
) -> int:
    """logits: (vocab,) float32 -> the chosen token id."""
    if strategy == "greedy":
        return int(logits.argmax())
    scaled = logits / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = scaled.softmax(dim=-1).to("cpu", torch.float64)
    return int(torch.multinomial(probs, 1, generator=generator))


def continue_text(
    loaded: LoadedModel,
    prompt: list[int],
    max_new_tokens: int,
    strategy: Strategy = "greedy",
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> Iterator[Step]:
    """Yields each new token after the prompt's token ids as it is chosen; stops after
    max_new_tokens or at end-of-text (which is not yielded). Needs a causal model with its LM
    head (loaded.predictor)."""
    device = model_device(loaded.model)
    ids = torch.tensor([prompt], device=device)  # (1, T)
    stop_ids = _stop_ids(loaded)
    generator = torch.Generator().manual_seed(seed)
    # The model fills the cache in place, a layer's keys and values at a time.
    cache = {cache_keyword(loaded.model): DynamicCache(config=loaded.model.config)}
    for _ in range(max_new_tokens):
        with loaded.lock, torch.inference_mode():
            out = loaded.model(input_ids=ids, use_cache=True, **cache)
            # The head on the last position only: never (tokens, vocab) logits for the prompt.
            logits = head_logits(loaded.predictor, out.last_hidden_state[0, -1])  # (vocab,)
        logits = logits.to(torch.float32)
        chosen = next_token(logits, strategy, temperature, top_k, generator)
        if chosen in stop_ids:
            return
        probability = float(logits.double().softmax(dim=-1)[chosen])  # float64: exact
        yield Step(token_id=chosen, probability=probability)
        ids = torch.tensor([[chosen]], device=device)  # (1, 1): the cache holds the rest


def cache_keyword(model: nn.Module) -> str:
    """The name the model's forward takes its key/value cache by: `cache` from transformers
    5.24 (which warns that `past_key_values` is going), `past_key_values` before it."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _stop_ids(loaded: LoadedModel) -> set[int]:
    eos = loaded.predictor.generation_config.eos_token_id
    if eos is None:
        eos = loaded.tokenizer.eos_token_id
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, list) else {int(eos)}
