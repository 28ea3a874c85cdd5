"""Patching from a second text (POST /api/attention/patching and /patching/exact): the clean
and corrupted texts' passes taken apart, then attribution patching (instant: one forward and
one backward pass) or exact patching (a batched rerun per layer, streamed with progress,
checked and reserved before its stream starts: check_exact)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Literal

import torch

from atlas_engine import compute
from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.forward import count_tokens, tokenize_once
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.patching import (
    Metric,
    Patched,
    attribution_patching,
    batch_size,
    exact_heads,
    exact_stream,
)
from atlas_engine.inference.predictions import top_predictions
from atlas_engine.inference.residual import Stream, run_stream
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.writes import MAX_PATCH_TOKENS, PatchingRequest, PatchingResponse
from atlas_engine.serialize import in_order, json_bytes_bound, json_with_float32
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.writes import check_direct, chosen, stream_bytes, token_id


@dataclass(frozen=True)
class Prepared:
    """Both texts' passes and the metric, before any patching."""

    loaded: LoadedModel
    clean: Stream
    corrupted: Stream  # with autograd's graph where prepared for attribution patching
    corrupted_inputs: dict
    metric: Metric
    clean_value: float
    corrupted_value: float
    fields: dict  # the response's fields that do not depend on the method


def patching_passes(loaded: LoadedModel, seq: int, components: str) -> tuple[int, int]:
    """(sequences run by exact patching, the largest batch): a layer's heads, or a layer's
    positions, batch_size of them a rerun."""
    arch = loaded.arch
    heads = arch.num_layers * arch.num_heads if components != "stream" else 0
    stream = arch.num_layers * seq if components != "heads" else 0
    batch = max(arch.num_heads if heads else 0, seq if stream else 0)
    return heads + stream, batch_size(batch, seq)


def recorded_bytes(loaded: LoadedModel, seq: int) -> int:
    """What exact patching keeps of one corrupted run while it patches: each block's output,
    float32 (the reruns start from them, atlas_engine.inference.residual.Replay)."""
    return 4 * loaded.arch.num_layers * seq * loaded.arch.d_model


def batch_bytes(loaded: LoadedModel, seq: int, batch: int) -> int:
    """What one batched pass without kept streams holds at a time, float32: a layer's
    activations (about 8 d_model a token) and its eager weights (heads × T² a sequence)."""
    arch = loaded.arch
    return 4 * batch * seq * (8 * arch.d_model + 2 * arch.num_heads * seq)


def check_request(passes: Passes, req: PatchingRequest) -> tuple[LoadedModel, int]:
    """The model and the texts' token count, every rule checked before any pass."""
    loaded = passes.model(req.model)
    check_direct(loaded, "patching")
    if req.text_pair is not None:
        raise InvalidInput("patching reads two texts, `text` and `corrupted`: leave out text_pair")
    seq = count_tokens(loaded, req.text, None, MAX_PATCH_TOKENS)
    other = count_tokens(loaded, req.corrupted, None, MAX_PATCH_TOKENS)
    if seq != other:
        raise InvalidInput(
            f"the clean text is {seq} tokens and the corrupted one {other}: patching copies "
            "position i of one run into position i of the other, so they must line up. Change "
            "the corrupted text so that it cuts into as many tokens (swap a word for another "
            "of one token)."
        )
    if req.position is not None and req.position >= seq:
        raise InvalidInput(f"position {req.position} is past the texts' last token ({seq - 1})")
    for choice, what in ((req.target, "target"), (req.contrast, "contrast")):
        if choice is not None:
            token_id(loaded, choice, what)  # a text of several tokens is refused before any pass
    return loaded, seq


def _prepare(loaded: LoadedModel, req: PatchingRequest, seq: int, grad: bool) -> Prepared:
    """Both passes and the metric; grad: the corrupted pass keeps its stream and autograd's
    graph (attribution patching's backward pass runs through it), else only its output."""
    position = seq - 1 if req.position is None else req.position
    clean_inputs, _ = tokenize_once(loaded, req.text, None)  # counted by check_request
    corrupted_inputs, _ = tokenize_once(loaded, req.corrupted, None)
    clean = run_stream(loaded, clean_inputs)
    corrupted = run_stream(loaded, corrupted_inputs, keep=grad, grad=grad)

    def top(stream: Stream) -> int:
        row = stream.last_hidden[0, position : position + 1].detach()
        return int(top_predictions(loaded.predictor, row, 1)[0][0, 0])

    target = token_id(loaded, req.target, "target") if req.target is not None else top(clean)
    named = req.contrast is not None
    contrast = token_id(loaded, req.contrast, "contrast") if named else top(corrupted)
    if contrast == target:
        raise InvalidInput(
            f"the metric's two tokens are the same ({chosen(loaded, target).token}): both texts "
            "guess it at this position, so name a `contrast` (or a `target`) to compare"
        )
    metric = Metric(position, target, contrast)
    with torch.inference_mode():
        clean_value = float(metric.of(loaded, clean)[0])
        corrupted_value = float(metric.of(loaded, corrupted)[0])
    if abs(clean_value - corrupted_value) < 1e-6 * max(1.0, abs(clean_value)):
        raise InvalidInput(
            f"the metric is the same on both texts ({clean_value:.4g}), so there is nothing to "
            "recover: make the corrupted text change the answer"
        )
    clean_ids = clean_inputs["input_ids"][0].tolist()
    corrupted_ids = corrupted_inputs["input_ids"][0].tolist()
    fields = {
        "model": loaded.id,
        "tokens": display_tokens(loaded.tokenizer, clean_ids)[0],
        "corrupted_tokens": display_tokens(loaded.tokenizer, corrupted_ids)[0],
        "differ": [
            i for i, (a, b) in enumerate(zip(clean_ids, corrupted_ids, strict=True)) if a != b
        ],
        "position": position,
        "target_id": target,
        "target": chosen(loaded, target).token,
        "contrast_id": contrast,
        "contrast": chosen(loaded, contrast).token,
        "clean": clean_value,
        "corrupted": corrupted_value,
    }
    return Prepared(
        loaded, clean, corrupted, corrupted_inputs, metric, clean_value, corrupted_value, fields
    )


def _answer(prepared: Prepared, method: str, found: Patched, passes: int, components: str) -> dict:
    fields = {
        **prepared.fields,
        "method": method,
        "heads": found.heads.float() if components != "stream" else None,
        "stream": found.stream.float() if components != "heads" else None,
        "passes": passes,
    }
    return in_order(fields, PatchingResponse)


def _bound(loaded: LoadedModel, seq: int) -> int:
    arch = loaded.arch
    numbers = arch.num_layers * (arch.num_heads + seq) + 2
    return json_bytes_bound(numbers, 2 * seq + 2)


def attribution(
    passes: Passes, req: PatchingRequest, should_stop: ShouldStop
) -> tuple[bytes, Reservation]:
    """Attribution patching: a PatchingResponse as JSON and its bytes' reservation."""
    loaded, seq = check_request(passes, req)
    with passes.answer(_bound(loaded, seq)) as answer, ExitStack() as held:
        size = stream_bytes(loaded.arch, seq) + stream_bytes(loaded.arch, seq, grad=True)
        held.callback(passes.reserve_bytes("stream", size).release)
        prepared = _prepare(loaded, req, seq, grad=True)
        if should_stop is not None and should_stop():
            raise RequestCancelled()
        found = attribution_patching(
            loaded, prepared.corrupted, prepared.clean, prepared.metric,
            prepared.clean_value, prepared.corrupted_value,
        )  # fmt: skip
        fields = _answer(prepared, "attribution", found, 2, req.components)
        return json_with_float32(fields), answer


class PatchingDone(PatchingResponse):
    """The last line of /patching/exact's stream."""

    event: Literal["done"]


@dataclass(frozen=True)
class ExactJob:
    """An exact patching run checked, its memory reserved and both texts' passes run, before
    its stream starts."""

    prepared: Prepared
    sequences: int  # the reruns' sequences (patching_passes)
    held: Reservation  # what the run holds at its peak: released when the run ends


def check_exact(passes: Passes, req: PatchingRequest) -> ExactJob:
    """Every rule of check_request, the run's memory reserved (else NoRoomYet on a compute
    lane, or 503), and both passes with the metric (_prepare, whose rules need them): what the
    route does before the stream's 200, so that every refusal is the answer's own status, not
    an error line in a stream."""
    loaded, seq = check_request(passes, req)
    sequences, batch = patching_passes(loaded, seq, req.components)
    size = stream_bytes(loaded.arch, seq) + recorded_bytes(loaded, seq)
    held = passes.reserve_bytes("stream", size + batch_bytes(loaded, seq, batch))
    try:
        return ExactJob(_prepare(loaded, req, seq, grad=False), sequences, held)
    except BaseException:
        held.release()
        raise


def exact(
    job: ExactJob,
    req: PatchingRequest,
    should_stop: Callable[[], bool],
    progress: Callable[[int, int], None],
) -> PatchingDone:
    """Exact patching of every component asked (check_exact first), reporting each layer as it
    starts. Before each batched rerun it stops if the client has gone (RequestCancelled) or
    the server is stopping (compute.ShuttingDown: its stream's 503 line), else lets short jobs
    waiting for the heavy lane run (compute.between_steps): a sentence sent meanwhile waits
    for one rerun, not for the whole run."""
    prepared = job.prepared
    loaded = prepared.loaded
    between = compute.between_steps(should_stop, "the patching reruns")
    args = (loaded, prepared.corrupted_inputs, prepared.clean, prepared.metric, between)
    n = loaded.arch.num_layers
    steps = n * (2 if req.components == "both" else 1)
    heads = stream = None
    if req.components != "stream":
        heads = exact_heads(*args, lambda done, _: progress(done, steps))
    if req.components != "heads":
        offset = n if heads is not None else 0
        stream = exact_stream(*args, lambda done, _: progress(offset + done, steps))
    progress(steps, steps)
    found = Patched(
        prepared.clean_value, prepared.corrupted_value,
        None if heads is None else Patched.recovery(heads, *_span(prepared)),
        None if stream is None else Patched.recovery(stream, *_span(prepared)),
    )  # fmt: skip
    fields = _answer(prepared, "exact", found, job.sequences + 2, req.components)
    return PatchingDone(event="done", **{k: _plain(v) for k, v in fields.items()})


def _span(prepared: Prepared) -> tuple[float, float]:
    return prepared.clean_value, prepared.corrupted_value


def _plain(value):
    return value.tolist() if isinstance(value, torch.Tensor) else value
