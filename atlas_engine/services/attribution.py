"""Direct logit attribution (POST /api/attention/attribution): one pass taken apart, each
piece's direct contribution to the logit (difference) at one position."""

from __future__ import annotations

from dataclasses import dataclass

from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.attribution import attribute, head_sources
from atlas_engine.inference.forward import count_tokens, tokenize_once
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.predictions import top_predictions
from atlas_engine.inference.residual import run_stream
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.writes import MAX_WRITES_TOKENS, AttributionRequest, AttributionResponse
from atlas_engine.serialize import in_order, json_bytes_bound
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.writes import (
    answered,
    candidate_fields,
    check_direct,
    chosen,
    stream_bytes,
    token_id,
)

CONVENTION = (
    "Each piece's direct effect: what it writes into the residual stream, read through the "
    "final norm with the norm's scale frozen at its value on this pass (and likewise any norm "
    "on the attention's output), along the unembedding of the target (minus the contrast's). "
    "The pieces and the bias terms sum to the real logit."
)
CANDIDATES = 10


@dataclass(frozen=True)
class AttributionPlan:
    """An attribution request checked and sized against its model, before any pass."""

    seq: int
    position: int
    target: int | None
    contrast: int | None
    answer_bytes: int


def plan_attribution(loaded: LoadedModel, req: AttributionRequest) -> AttributionPlan:
    """Every rule checked and the answer's bytes bounded, before any pass."""
    check_direct(loaded, "direct logit attribution")
    if req.text_pair is not None:
        raise InvalidInput("direct logit attribution reads one text: leave out text_pair")
    if req.source is not None:
        check_layer_head(loaded, req.source.layer, req.source.head)
    seq = count_tokens(loaded, req.text, None, MAX_WRITES_TOKENS)
    position = seq - 1 if req.position is None else req.position
    if position >= seq:
        raise InvalidInput(f"position {position} is past the text's last token ({seq - 1})")
    target = token_id(loaded, req.target, "target") if req.target is not None else None
    contrast = token_id(loaded, req.contrast, "contrast") if req.contrast is not None else None
    arch = loaded.arch
    numbers = arch.num_layers * (arch.num_heads + 2) + 4 + CANDIDATES + 2 * seq
    bound = json_bytes_bound(numbers, seq + CANDIDATES + 2)
    return AttributionPlan(seq, position, target, contrast, bound)


def attribution_fields(
    loaded: LoadedModel,
    req: AttributionRequest,
    plan: AttributionPlan,
    should_stop: ShouldStop = None,
) -> dict:
    """The AttributionResponse's fields (float tensors where json_with_float32 writes them)."""
    position, target, contrast = plan.position, plan.target, plan.contrast
    inputs, _ = tokenize_once(loaded, req.text, None)  # the encoding count_tokens made
    layer = req.source.layer if req.source is not None else None
    stream = run_stream(loaded, inputs, weights_of=layer)
    if should_stop is not None and should_stop():
        raise RequestCancelled()
    row = stream.last_hidden[0, position : position + 1]
    ids, probs = top_predictions(loaded.predictor, row, CANDIDATES)
    target = int(ids[0, 0]) if target is None else target
    if contrast == target:
        raise InvalidInput("target and contrast are the same token: pick another contrast")
    found = attribute(loaded, stream, position, target, contrast)
    source = None
    if req.source is not None:
        split = head_sources(loaded, stream, layer, req.source.head, position, target, contrast)
        source = {
            "layer": layer,
            "head": req.source.head,
            "values": split.float(),
            "weights": stream.weights[0, req.source.head, position].float().cpu(),
        }
    del stream
    fields = {
        "model": loaded.id,
        "tokens": display_tokens(loaded.tokenizer, inputs["input_ids"][0].tolist())[0],
        "position": position,
        "target": chosen(loaded, target).model_dump(),
        "contrast": chosen(loaded, contrast).model_dump() if contrast is not None else None,
        "candidates": candidate_fields(loaded.tokenizer, ids[0].tolist(), probs[0].numpy()),
        "logit": found.logit,
        "total": found.total,
        "embeddings": found.embeddings,
        "heads": found.heads.float(),
        "attention_bias": found.attention_bias.float(),
        "mlps": found.mlps.float(),
        "bias": found.bias,
        "convention": CONVENTION,
        "source": source,
    }
    return in_order(fields, AttributionResponse)


def attribution(
    passes: Passes,
    req: AttributionRequest,
    should_stop: ShouldStop = None,
) -> tuple[bytes, Reservation]:
    """An AttributionResponse as JSON and its bytes' reservation (released once sent)."""
    loaded = passes.model(req.model)
    plan = plan_attribution(loaded, req)
    return answered(
        passes, plan.answer_bytes, stream_bytes(loaded.arch, plan.seq),
        lambda: attribution_fields(loaded, req, plan, should_stop),
    )  # fmt: skip
