"""A forward pass run ahead of the windows that will read it (POST /api/attention/forward): long
texts take seconds (SmolLM2 over 8,192 tokens: about 20 s on two cores), so the route streams
each layer's start, and a client that leaves stops the pass within one layer."""

from __future__ import annotations

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.forward import Progress, count_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.attention import TextRequest
from atlas_engine.schemas.forward import ForwardDone
from atlas_engine.services.passes import Passes, ShouldStop


def checked_model(passes: Passes, req: TextRequest) -> LoadedModel:
    """The model, with the text checked against its whole token limit (before any stream)."""
    loaded = passes.model(req.model)
    if not loaded.maps_replayed:
        raise InvalidInput(
            f"'{loaded.id}' keeps its maps whole (they are not replayed), so its texts are at most "
            f"{loaded.max_tokens} tokens and need no forward pass of their own: use "
            "POST /api/attention"
        )
    count_tokens(loaded, req.text, req.text_pair)
    return loaded


def run_pass(
    loaded: LoadedModel,
    passes: Passes,
    req: TextRequest,
    should_stop: ShouldStop,
    progress: Progress,
) -> ForwardDone:
    """The pass over the request's text, from the cache or run now (reporting progress)."""
    held = passes.reserve(loaded, req.text, req.text_pair, should_stop, False, progress)
    held.release()  # the cache keeps it (within its bound); windows reserve their own
    result = held.result
    return ForwardDone(
        event="done",
        model=loaded.id,
        tokens=result.tokens,
        special_tokens=result.special,
        seq_len=result.seq_len,
        num_layers=loaded.arch.num_layers,
        num_heads=loaded.arch.num_heads,
        num_kv_heads=loaded.arch.num_kv_heads,
        causal=loaded.causal,
        cached=held.cached,
        forward_ms=round(result.forward_seconds * 1000, 3),
        full_map_tokens=loaded.full_map_tokens,
    )
