"""What the lens, attribution and patching services share: the token a request names, the
refusals that come before any work, and what a pass taken apart holds (sized from the request)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from atlas_engine.errors import InvalidInput
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.residual import layout_of
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.families import Architecture
from atlas_engine.models.lm_head import head_kind, no_head_reason
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.writes import ChosenToken, TokenById, TokenChoice
from atlas_engine.serialize import json_with_float32
from atlas_engine.services.passes import Passes

GRAD_FACTOR = 16
"""What a pass with autograd holds, in streams taken apart: the graph keeps every layer's
activations (norms, MLP, scores) for the backward pass; a generous multiple, not a measurement."""


def token_id(loaded: LoadedModel, choice: TokenChoice, what: str) -> int:
    """The id a TokenChoice names, checked against the model's vocabulary."""
    tokenizer = loaded.tokenizer
    head = loaded.predictor.get_output_embeddings() if loaded.predictor is not None else None
    vocab = min(len(tokenizer), head.weight.shape[0]) if head is not None else len(tokenizer)
    if isinstance(choice, TokenById):
        if choice.id >= vocab:
            raise InvalidInput(
                f"{what}: token id {choice.id} is not in the vocabulary (0 to {vocab - 1})"
            )
        return choice.id
    ids = tokenizer.encode(choice.text, add_special_tokens=False)
    if len(ids) != 1:
        pieces = display_tokens(tokenizer, ids)[0] if ids else []
        raise InvalidInput(
            f"{what}: {choice.text!r} is {len(ids)} tokens for this model ({' | '.join(pieces)}), "
            "not one; pick one of them (mind the leading space: ' Paris' and 'Paris' differ)"
        )
    return ids[0]


def chosen(loaded: LoadedModel, token: int) -> ChosenToken:
    return ChosenToken(token_id=token, token=display_tokens(loaded.tokenizer, [token])[0][0])


def check_lens(loaded: LoadedModel) -> None:
    """422 saying why, where a model has no head to read the stream with."""
    if loaded.predictor is None:
        raise InvalidInput(no_head_reason(loaded.id, head_kind(loaded.family, None)))
    refusal = layout_of(loaded).lens_refusal
    if refusal is not None:
        raise InvalidInput(f"'{loaded.id}' has no logit lens: {refusal}")


def check_direct(loaded: LoadedModel, what: str) -> None:
    """422 saying why, where a model's pieces have no direct effect on a logit."""
    check_lens(loaded)
    refusal = layout_of(loaded).direct_refusal
    if refusal is not None:
        raise InvalidInput(f"'{loaded.id}' has no {what}: {refusal}")


def stream_bytes(arch: Architecture, seq: int, batch: int = 1, grad: bool = False) -> int:
    """What run_stream holds for `batch` sequences of `seq` tokens: each block's input, output,
    projected and written stream (4 × d_model a token a layer) and its heads' outputs (about
    d_model), float32; GRAD_FACTOR times that with autograd's graph."""
    numbers = batch * arch.num_layers * seq * (5 * arch.d_model + arch.num_heads * arch.head_dim)
    return 4 * numbers * (GRAD_FACTOR if grad else 1)


def candidate_fields(tokenizer, ids: list[int], probs) -> list[dict]:
    """Candidates (atlas_engine.schemas.predictions.Candidate) as JSON-ready fields, most likely first;
    probs: a float32 array, written as float32 (json_with_float32)."""
    labels = display_tokens(tokenizer, ids)[0]
    return [
        {"token_id": i, "token": label, "probability": min(p, np.float32(1.0))}
        for i, label, p in zip(ids, labels, probs, strict=True)
    ]


def answered(
    passes: Passes, answer_bytes: int, stream: int, build: Callable[[], dict]
) -> tuple[bytes, Reservation]:
    """build()'s fields as JSON (json_with_float32), with the answer's bytes reserved before
    it runs and `stream` bytes (what its passes hold) reserved while it runs; the answer's
    reservation is returned for the caller to release once the bytes are sent."""
    with passes.answer(answer_bytes) as answer:
        held = passes.reserve_bytes("stream", stream)
        try:
            fields = build()
        finally:
            held.release()
        return json_with_float32(fields), answer
