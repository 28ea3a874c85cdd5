"""POST /api/attention/circuit: edges between heads, on one text (head_inputs) or between a
clean and a corrupted text (edge attribution patching, edges), the strongest first."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.edges import INPUTS, edge_scores
from atlas_engine.inference.forward import count_tokens, tokenize
from atlas_engine.inference.head_inputs import head_inputs
from atlas_engine.inference.head_weights import CONVENTION as WEIGHTS_CONVENTION
from atlas_engine.inference.head_weights import model_composition
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.patching import Metric
from atlas_engine.inference.predictions import top_predictions
from atlas_engine.inference.score_trace import TraceRefused, trace_layout
from atlas_engine.inference.tokens import display_tokens
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.circuit import MAX_CIRCUIT_TOKENS, CircuitRequest, CircuitResponse
from atlas_engine.serialize import in_order, json_bytes_bound
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.writes import GRAD_FACTOR, answered, check_direct, chosen, token_id

TEXT_CONVENTION = (
    "An edge into a later head's query (or key) is the share of its attention-weighted score, "
    "(1/T) Σ_ij α_ij · scale · q_i·k_j, that the earlier head wrote through the query (or the "
    "key); into its value, the share of its output (projected on the output itself, so a "
    "head's value shares and the rest sum to 1). Every norm's scale is frozen at its value on "
    "this text, as in the trace of one score."
)
EDGES_CONVENTION = (
    "Edge attribution patching: (the earlier head's write on the clean text - on the corrupted "
    "one) · the metric's gradient on the corrupted text through the later head's query, key or "
    "value alone, over clean - corrupted: the share of the difference patching that edge alone "
    "would recover, to first order. Under GQA a key/value head is one input its group shares."
)


@dataclass(frozen=True)
class CircuitPlan:
    seq: int
    answer_bytes: int
    held_bytes: int


def plan_circuit(loaded: LoadedModel, req: CircuitRequest) -> CircuitPlan:
    """Every rule checked and the answer's and the work's bytes bounded, before any pass."""
    if req.text_pair is not None:
        raise InvalidInput("a circuit reads `text` (and `corrupted`): leave out text_pair")
    if not loaded.replayable:
        raise InvalidInput(f"'{loaded.id}' has no circuit: its heads are not replayed")
    layout = trace_layout(loaded)
    if layout.refusal is not None:
        raise InvalidInput(f"'{loaded.id}' has no circuit: {layout.refusal}")
    seq = count_tokens(loaded, req.text, None, MAX_CIRCUIT_TOKENS)
    if req.by == "edges":
        check_direct(loaded, "edge attribution patching")
        if req.corrupted is None:
            raise InvalidInput("by=edges patches from `text` into `corrupted`: send `corrupted`")
        if any(roles.kind != "sum" for roles in layout.roles):
            raise InvalidInput(
                f"'{loaded.id}' has no edge attribution patching: its blocks renormalise the "
                "stream, so a head's write is not an edge"
            )
        other = count_tokens(loaded, req.corrupted, None, MAX_CIRCUIT_TOKENS)
        if other != seq:
            raise InvalidInput(
                f"the clean text is {seq} tokens and the corrupted one {other}: they must line "
                "up position by position"
            )
        if req.position is not None and req.position >= seq:
            raise InvalidInput(f"position {req.position} is past the texts' last token")
        for choice, what in ((req.target, "target"), (req.contrast, "contrast")):
            if choice is not None:
                token_id(loaded, choice, what)
    elif any(v is not None for v in (req.corrupted, req.position, req.target, req.contrast)):
        raise InvalidInput("corrupted, position, target and contrast belong to by=edges")
    if req.focus is not None:
        if req.by != "text":
            raise InvalidInput("focus answers one head's inputs: it belongs to by=text")
        check_layer_head(loaded, req.focus.layer, req.focus.head)
    arch = loaded.arch
    numbers = 6 * req.top + 3 * arch.num_layers * arch.num_heads
    numbers += 3 * (arch.num_layers * (arch.num_heads + 1) + 8) + 8
    answer = json_bytes_bound(numbers, seq + 8, chars=2 * len(TEXT_CONVENTION))
    writes = 8 * arch.num_layers * arch.num_heads * seq * arch.d_model
    gradients = 8 * 3 * arch.num_heads * seq * arch.d_model
    passes = (
        4 * arch.num_layers * seq * 6 * arch.d_model * (GRAD_FACTOR if req.by == "edges" else 1)
    )
    return CircuitPlan(seq, answer, writes + gradients + passes)


def _top_edges(values: dict[str, list[Tensor]], inputs: list[str], top: int):
    """The `top` strongest edges of values[p][l] ((l, H, heads_p): earlier layer, earlier head,
    later head), and how many there were."""
    found = []
    for p in inputs:
        for layer, grid in enumerate(values[p]):
            if grid.numel():
                found.append((p, layer, grid))
    flat = torch.cat([grid.flatten() for _, _, grid in found]) if found else torch.zeros(0)
    order = flat.abs().argsort(descending=True)[:top].tolist()
    offsets, edges = [], []
    start = 0
    for entry in found:
        offsets.append(start)
        start += entry[2].numel()
    for index in order:
        which = max(i for i, o in enumerate(offsets) if o <= index)
        p, layer, grid = found[which]
        m, u, v = (int(i) for i in torch.unravel_index(torch.tensor(index - offsets[which]),
                                                        grid.shape))  # fmt: skip
        edges.append({"from_layer": m, "from_head": u, "to_layer": layer, "to_head": v,
                      "input": p, "value": float(grid[m, u, v])})  # fmt: skip
    largest = float(flat.abs().max()) if flat.numel() else 0.0
    return edges, int(flat.numel()), largest


def _by_text(loaded: LoadedModel, req: CircuitRequest) -> dict:
    layers = list(range(loaded.arch.num_layers))
    found = head_inputs(loaded, req.text, layers)
    values: dict[str, list[Tensor]] = {p: [] for p in INPUTS}
    for index, layer in enumerate(layers):
        for k, p in enumerate(INPUTS):
            # (n later heads, L, H) -> (l, H, n): earlier layer, earlier head, later head
            values[p].append(found.from_heads[k, index, :, :layer].permute(1, 2, 0))
    totals = found.totals
    focus = None
    if req.focus is not None:
        i, h = req.focus.layer, req.focus.head
        focus = {
            "layer": req.focus.layer,
            "head": h,
            "totals": found.totals[:, i, h].tolist(),
            "heads": found.from_heads[:, i, h].float(),
            "mlps": found.from_mlps[:, i, h].float(),
            "embeddings": found.from_embeddings[:, i, h].float(),
            "embedding_labels": found.embedding_labels,
            "bias": found.bias[:, i, h].tolist(),
        }
    return {"values": values, "totals": totals, "focus": focus, "ids": found.token_ids,
            "metric": None, "convention": TEXT_CONVENTION}  # fmt: skip


def _by_weights(loaded: LoadedModel, req: CircuitRequest) -> dict:
    found = model_composition(loaded)
    scores, baseline = found.composition.scores, found.baseline
    n_layers, heads = loaded.arch.num_layers, loaded.arch.num_heads
    values: dict[str, list[Tensor]] = {p: [] for p in INPUTS}
    totals = torch.zeros(3, n_layers, heads, dtype=torch.float64)
    for k, p in enumerate(INPUTS):
        for layer in range(n_layers):
            # [a, i, b, j] -> (layer, H, later head): above the random heads' mean score
            grid = scores[p][:layer, :, layer, :].double() - baseline[p]
            values[p].append(grid)
            totals[k, layer] = grid.sum((0, 1)) if layer else 0.0
    ids = tokenize(loaded, req.text, None)[0]["input_ids"][0].tolist()
    seconds = found.weights_seconds + found.scores_seconds
    return {"values": values, "totals": totals, "focus": None, "ids": ids,
            "metric": {"baseline": dict(baseline), "seconds": seconds},
            "convention": WEIGHTS_CONVENTION}  # fmt: skip


def _by_edges(loaded: LoadedModel, req: CircuitRequest, seq: int) -> dict:
    position = seq - 1 if req.position is None else req.position
    target = token_id(loaded, req.target, "target") if req.target is not None else None
    contrast = token_id(loaded, req.contrast, "contrast") if req.contrast is not None else None

    def choose(clean_last: Tensor, corrupted_last: Tensor) -> Metric:
        def top(last: Tensor) -> int:
            return int(top_predictions(loaded.predictor, last[position : position + 1], 1)[0][0, 0])

        t = top(clean_last) if target is None else target
        c = top(corrupted_last) if contrast is None else contrast
        if t == c:
            raise InvalidInput(
                f"the metric's two tokens are the same ({chosen(loaded, t).token}): name a "
                "`contrast` (or a `target`) to compare"
            )
        return Metric(position, t, c)

    found = edge_scores(loaded, req.text, req.corrupted, choose)
    if abs(found.clean - found.corrupted) < 1e-6 * max(1.0, abs(found.clean)):
        raise InvalidInput(
            f"the metric is the same on both texts ({found.clean:.4g}): make the corrupted text "
            "change the answer"
        )
    heads = loaded.arch.num_heads
    totals = torch.zeros(3, loaded.arch.num_layers, heads, dtype=torch.float64)
    for k, p in enumerate(INPUTS):
        for layer, grid in enumerate(found.scores[p]):
            if grid.numel():
                totals[k, layer, : grid.shape[2]] = grid.sum((0, 1))
    metric = found.metric
    ids = tokenize(loaded, req.text, None)[0]["input_ids"][0].tolist()
    return {
        "values": found.scores,
        "totals": totals,
        "focus": None,
        "ids": ids,
        "metric": {
            "position": position,
            "target": chosen(loaded, metric.target).token,
            "contrast": chosen(loaded, metric.contrast).token,
            "clean": found.clean,
            "corrupted": found.corrupted,
        },
        "convention": EDGES_CONVENTION,
    }


def circuit_fields(
    loaded: LoadedModel, req: CircuitRequest, plan: CircuitPlan, should_stop: ShouldStop = None
) -> dict:
    try:
        if req.by == "text":
            found = _by_text(loaded, req)
        elif req.by == "weights":
            found = _by_weights(loaded, req)
        else:
            found = _by_edges(loaded, req, plan.seq)
    except TraceRefused as err:
        raise InvalidInput(str(err)) from None
    if should_stop is not None and should_stop():
        raise RequestCancelled()
    edges, count, largest = _top_edges(found["values"], req.inputs, req.top)
    fields = {
        "model": loaded.id,
        "tokens": display_tokens(loaded.tokenizer, found["ids"])[0],
        "by": req.by,
        "layers": loaded.arch.num_layers,
        "heads": loaded.arch.num_heads,
        "kv_heads": loaded.arch.num_kv_heads,
        "edges": edges,
        "edge_count": count,
        "largest": largest,
        "node_totals": found["totals"].float(),
        "focus": found["focus"],
        "metric": found["metric"],
        "convention": found["convention"],
    }
    return in_order(fields, CircuitResponse)


def circuit(
    passes: Passes, req: CircuitRequest, should_stop: ShouldStop = None
) -> tuple[bytes, Reservation]:
    """A CircuitResponse as JSON and its bytes' reservation (released once sent)."""
    loaded = passes.model(req.model)
    plan = plan_circuit(loaded, req)
    return answered(
        passes, plan.answer_bytes, plan.held_bytes,
        lambda: circuit_fields(loaded, req, plan, should_stop),
    )  # fmt: skip
