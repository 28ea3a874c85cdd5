"""A decoder continuing a text (POST /api/attention/generate), streamed as one JSON line per new
token and a last line with the whole text, whose maps every view can then open."""

from __future__ import annotations

import json
from collections.abc import Iterator

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import tokenize
from atlas_engine.inference.generate import continue_text
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.attention import MAX_TEXT_CHARS
from atlas_engine.schemas.generate import GeneratedToken, GenerateRequest, GenerationDone
from atlas_engine.services.passes import Passes
from attention_core import kv_cache_bytes


def _checked(loaded: LoadedModel, req: GenerateRequest) -> list[int]:
    """The prompt's token ids, after refusing what cannot be generated."""
    if not loaded.causal or loaded.predictor is None:
        why = "it is not a causal decoder" if not loaded.causal else "it has no LM head"
        raise InvalidInput(
            f"'{loaded.id}' cannot continue a text: {why}. Use a GPT-2 or Llama-family model "
            "saved with its language-model head."
        )
    if req.text_pair is not None:
        raise InvalidInput("text_pair is for BERT-family encoders; a decoder continues `text`")
    ids = _token_ids(loaded, req.text)
    prompt = len(ids)
    if prompt + req.max_new_tokens > loaded.full_map_tokens:
        raise InvalidInput(
            f"the prompt is {prompt} tokens and '{loaded.id}' takes at most {loaded.full_map_tokens} "
            f"here, so at most {max(0, loaded.full_map_tokens - prompt)} new tokens fit; asked for "
            f"{req.max_new_tokens}."
        )
    return ids


def _token_ids(loaded: LoadedModel, text: str) -> list[int]:
    """The text's token ids as the forward pass tokenises it (refusing what it refuses)."""
    return tokenize(loaded, text, None)[0]["input_ids"][0].tolist()


def start_generation(passes: Passes, req: GenerateRequest) -> tuple[Iterator[bytes], Reservation]:
    """Checks and sizes the request, reserves its key/value cache, and returns the stream's
    lines (NDJSON) with the reservation to release when the stream ends."""
    loaded = passes.model(req.model)
    prompt = _checked(loaded, req)
    arch = loaded.arch
    cache_bytes = kv_cache_bytes(
        len(prompt) + req.max_new_tokens, layers=arch.num_layers, kv_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        bytes_per_value=next(loaded.model.parameters()).element_size(),
    )  # fmt: skip
    reservation = passes.reserve_bytes("generate", cache_bytes)
    return _lines(loaded, req, prompt), reservation


def _lines(loaded: LoadedModel, req: GenerateRequest, prompt: list[int]) -> Iterator[bytes]:
    new_ids: list[int] = []
    continuation = ""
    stopped = "end_of_text"
    steps = continue_text(
        loaded, prompt, req.max_new_tokens, req.strategy, req.temperature, req.top_k, req.seed
    )
    for step in steps:
        grown = loaded.tokenizer.decode(
            [*new_ids, step.token_id], skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )  # fmt: skip
        if len(req.text) + len(grown) > MAX_TEXT_CHARS:
            stopped = "characters"
            break
        new_ids.append(step.token_id)
        continuation = grown
        line = GeneratedToken(
            event="token",
            index=len(new_ids) - 1,
            prompt_tokens=len(prompt),
            token_id=step.token_id,
            token=display_tokens(loaded.tokenizer, [step.token_id])[0][0],
            probability=min(step.probability, 1.0),
            continuation=continuation,
        )
        yield _ndjson(line)
    else:
        if len(new_ids) == req.max_new_tokens:
            stopped = "length"
    text = req.text + continuation
    try:
        again = _token_ids(loaded, text)
    except InvalidInput:  # it tokenises into more tokens than the model takes
        again = None
    done = GenerationDone(
        event="done",
        text=text,
        prompt_tokens=len(prompt),
        generated=len(new_ids),
        stopped=stopped,
        exact=again == prompt + new_ids,
    )
    yield _ndjson(done)


def _ndjson(line) -> bytes:
    return (json.dumps(line.model_dump(), ensure_ascii=False) + "\n").encode("utf-8")
