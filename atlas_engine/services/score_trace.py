"""POST /api/attention/trace: why a head attends where it does, one score taken apart into the
residual stream's pieces (atlas_engine.inference.score_trace), with the largest pairs in words."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch import Tensor

from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.forward import count_tokens
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.score_trace import (
    FROZEN,
    PARTS_MAX_REL,
    Piece,
    ScoreTrace,
    TraceRefused,
    trace_layout,
    trace_score,
)
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.trace import MAX_TRACE_TOKENS, TraceRequest, TraceResponse
from atlas_engine.serialize import in_order, json_bytes_bound
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.writes import answered, stream_bytes

CONVENTION = (
    FROZEN + " A softcap (Gemma 2) is applied after the traced score; a position bias (T5) is "
    "a term of its own; attention sinks take a share of the softmax but are no part of a score; "
    "under GQA the key is the group's shared key head; a key outside the mask has no score."
)
PAIRS = 6


@dataclass(frozen=True)
class TracePlan:
    seq: int
    answer_bytes: int
    held_bytes: int


def plan_trace(loaded: LoadedModel, req: TraceRequest) -> TracePlan:
    """Every rule checked and the answer's and the work's bytes bounded, before any pass."""
    if req.text_pair is not None:
        raise InvalidInput("a trace reads one text: leave out text_pair")
    if not loaded.replayable:
        raise InvalidInput(f"'{loaded.id}' has no trace: its heads are not replayed")
    check_layer_head(loaded, req.layer, req.head)
    layout = trace_layout(loaded)
    if layout.refusal is not None:
        raise InvalidInput(f"'{loaded.id}' has no trace: {layout.refusal}")
    seq = count_tokens(loaded, req.text, None, MAX_TRACE_TOKENS)
    for name in ("query", "key", "contrast"):
        value = getattr(req, name)
        if value is not None and value >= seq:
            raise InvalidInput(f"{name} {value} is past the text's last token ({seq - 1})")
    arch = loaded.arch
    pieces = arch.num_layers * (arch.num_heads + 1) + 4
    shown = 4 * req.top + 2
    numbers = 2 * (2 * pieces + shown * shown + 2 * PAIRS) + seq + 12
    answer = json_bytes_bound(numbers, seq + pieces, chars=400 * (2 * PAIRS + 6))
    width = arch.d_model + 3 * arch.num_heads * arch.head_dim  # a row replayed: input, q, k, v
    held = stream_bytes(arch, seq) + 4 * (shown + 2) * seq * width + 8 * 3 * pieces * arch.d_model
    return TracePlan(seq, answer, held)


def _where(piece: Piece | None, token: str) -> str:
    if piece is None:
        return "every other piece"
    if piece.kind == "embedding":
        return f"the {piece.label} of '{token}'"
    if piece.kind == "head":
        return f"layer {piece.layer} head {piece.head}'s output at '{token}'"
    if piece.kind == "mlp":
        return f"layer {piece.layer}'s MLP output at '{token}'"
    return "the bias terms"


def _sides(trace: ScoreTrace, tokens: list[str], contrast: bool) -> dict:
    """TraceSides' fields for the score (or for the difference against the contrast)."""
    if contrast:
        score, q, k, m = (trace.contrast_score, trace.contrast_query_side,
                          trace.contrast_key_side, trace.contrast_matrix)  # fmt: skip
        bias = trace.contrast_position_bias
    else:
        score, q, k, m = trace.score, trace.query_side, trace.key_side, trace.matrix
        bias = trace.position_bias
    rows = [*trace.shown, -1, len(trace.names) - 1]  # -1: every other piece
    flat = m.flatten()
    pairs = []
    for index in flat.abs().argsort(descending=True)[:PAIRS].tolist():
        qi, ki = rows[index // m.shape[1]], rows[index % m.shape[1]]
        value = float(flat[index])
        named = [None if i < 0 else trace.names[i] for i in (qi, ki)]
        key_text = _where(named[1], tokens[trace.key])
        if contrast:
            key_text += f" (less at '{tokens[trace.contrast]}')"
        text = f"{key_text} meeting {_where(named[0], tokens[trace.query])}: {value:+.3g}"
        pairs.append({"query_piece": qi, "key_piece": ki, "value": value, "text": text})
    return {
        "score": score,
        "position_bias": bias,
        "query_side": q.float(),
        "key_side": k.float(),
        "matrix": m.float(),
        "pairs": pairs,
    }


def _leader(side: Tensor, names: list[Piece], token: str) -> str:
    best = int(side.abs().argmax())
    return f"{_where(names[best], token)} ({float(side[best]):+.3g})"


def summary(trace: ScoreTrace, tokens: list[str], layer: int, head: int) -> list[str]:
    """What the trace shows, in sentences."""
    q, k = tokens[trace.query], tokens[trace.key]
    weight = float(trace.weights[trace.key])
    top = _sides(trace, tokens, False)["pairs"][0]
    lines = [
        f"Layer {layer} head {head}: '{q}' attends to '{k}' with weight {weight:.3g} (score "
        f"{trace.score:.3g}), mostly because of {top['text'].rsplit(':', 1)[0]} "
        f"({top['value']:+.3g}).",
        f"Through the key, the most comes from {_leader(trace.key_side, trace.names, k)}; "
        f"through the query, from {_leader(trace.query_side, trace.names, q)}.",
    ]
    if trace.contrast is not None:
        c = tokens[trace.contrast]
        lines.append(
            f"Against '{c}' (weight {float(trace.weights[trace.contrast]):.3g}) the score is "
            f"{trace.contrast_score:+.3g} higher; the key side's largest difference is "
            f"{_leader(trace.contrast_key_side, trace.names, k)}."
        )
    return lines


def trace_fields(
    loaded: LoadedModel, req: TraceRequest, plan: TracePlan, should_stop: ShouldStop = None
) -> dict:
    """The TraceResponse's fields (float tensors where json_with_float32 writes them)."""
    try:
        trace = trace_score(
            loaded, req.text, req.layer, req.head, req.query, req.key, req.contrast, req.top
        )
    except TraceRefused as err:
        raise InvalidInput(str(err)) from None
    if should_stop is not None and should_stop():
        raise RequestCancelled()
    tokens = display_tokens(loaded.tokenizer, trace.token_ids)[0]
    size = max(1.0, float(trace.matrix.abs().sum()))
    fields = {
        "model": loaded.id,
        "tokens": tokens,
        "layer": req.layer,
        "head": req.head,
        "key_head": trace.key_head,
        "query": trace.query,
        "key": trace.key,
        "contrast": trace.contrast,
        "weight": np.float32(trace.weights[trace.key]),  # as `weights` writes it
        "weights": trace.weights.float(),
        "score": trace.score,
        "capped": trace.capped,
        "position_bias": trace.position_bias,
        "parts_sum": trace.parts_sum,
        "bound": PARTS_MAX_REL * size,
        "pieces": [
            {"kind": p.kind, "label": p.label, "layer": p.layer, "head": p.head}
            for p in trace.names
        ],
        "shown": trace.shown,
        "trace": _sides(trace, tokens, False),
        "versus": _sides(trace, tokens, True) if trace.contrast is not None else None,
        "summary": summary(trace, tokens, req.layer, req.head),
        "convention": CONVENTION,
        "stream_max_abs_diff": trace.stream_max_abs_diff,
    }
    return in_order(fields, TraceResponse)


def score_trace(
    passes: Passes, req: TraceRequest, should_stop: ShouldStop = None
) -> tuple[bytes, Reservation]:
    """A TraceResponse as JSON and its bytes' reservation (released once sent)."""
    loaded = passes.model(req.model)
    plan = plan_trace(loaded, req)
    return answered(
        passes, plan.answer_bytes, plan.held_bytes,
        lambda: trace_fields(loaded, req, plan, should_stop),
    )  # fmt: skip
