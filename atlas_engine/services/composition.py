"""POST /api/attention/composition: every pair of heads' Q-, K- and V-composition from the
weights (atlas_engine.inference.head_weights, computed once per loaded model), the strongest
edges above the random baseline first."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from atlas_engine.errors import InvalidInput, RequestCancelled
from atlas_engine.inference.head_weights import (
    CONVENTION,
    ModelComposition,
    cached_composition,
    composition_progress,
    model_composition,
)
from atlas_engine.inference.inflight import Reservation
from atlas_engine.inference.score_trace import TraceRefused, trace_layout
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.composition import (
    CompositionRequest,
    CompositionResponse,
    CompositionStatus,
)
from atlas_engine.serialize import in_order, json_bytes_bound
from atlas_engine.services.checks import check_layer_head
from atlas_engine.services.passes import Passes, ShouldStop
from atlas_engine.services.writes import answered

EDGE_NUMBERS = 7  # an edge's fields, each at most a number's bytes


@dataclass(frozen=True)
class CompositionPlan:
    kinds: list[str]
    answer_bytes: int
    held_bytes: int


def plan_composition(loaded: LoadedModel, req: CompositionRequest) -> CompositionPlan:
    """Every rule checked and the answer's and the work's bytes bounded, before any work."""
    if not loaded.replayable:
        raise InvalidInput(f"'{loaded.id}' has no composition scores: its heads are not replayed")
    layout = trace_layout(loaded)
    if layout.refusal is not None:
        raise InvalidInput(f"'{loaded.id}' has no composition scores: {layout.refusal}")
    if req.focus is not None:
        check_layer_head(loaded, req.focus.layer, req.focus.head)
        if req.focus.layer == 0:
            raise InvalidInput("focus: layer 0 has no earlier heads; pick a later layer")
    kinds = ["q", "k", "v"] if req.kind == "all" else [req.kind]
    arch = loaded.arch
    heads = arch.num_layers * arch.num_heads
    numbers = len(kinds) * (EDGE_NUMBERS * req.top + 6 + heads) + 8
    answer = json_bytes_bound(numbers, 0, chars=2 * len(CONVENTION))
    held = 0 if cached_composition(loaded) else _working_bytes(arch)
    return CompositionPlan(kinds, answer, held)


def _working_bytes(arch) -> int:
    """What scoring every pair holds (attention_core.composition): the four maps of every head
    in float64 and in float32, every earlier head's packed d × d Gram in float32, and a later
    layer's three Grams a head (693 MB for SmolLM2)."""
    heads, width = arch.num_layers * arch.num_heads, arch.d_model
    maps = 4 * heads * arch.head_dim * width * (8 + 4)
    later = 4 * 3 * arch.num_heads * width * width
    return maps + 4 * heads * width * (width + 1) // 2 + later


def _edges(found: ModelComposition, kinds: list[str], top: int) -> list[dict]:
    """The `top` edges of the largest score - baseline above 0, over the kinds asked."""
    excess = torch.stack(
        [found.composition.scores[k] - found.baseline[k] for k in kinds]
    ).nan_to_num(-1.0)  # (kinds, L, H, L, H): a pair that is not earlier -> later never counts
    values, order = excess.flatten().topk(min(top, excess.numel()))
    edges = []
    for value, index in zip(values.tolist(), order.tolist(), strict=True):
        if value <= 0:
            break
        k, a, i, b, j = (int(x) for x in torch.unravel_index(torch.tensor(index), excess.shape))
        kind = kinds[k]
        edges.append({"from_layer": a, "from_head": i, "to_layer": b, "to_head": j, "kind": kind,
                      "score": float(found.composition.scores[kind][a, i, b, j]),
                      "baseline": found.baseline[kind], "excess": value})  # fmt: skip
    return edges


def _summary(found: ModelComposition, kind: str) -> dict:
    scores = found.composition.scores[kind]
    pairs = scores[scores.isfinite()]
    base = found.baseline[kind]
    return {"kind": kind, "baseline": base,
            "mean": float(pairs.double().mean()) if pairs.numel() else 0.0,
            "largest": float(pairs.max()) if pairs.numel() else 0.0,
            "above": int((pairs > base).sum()), "pairs": int(pairs.numel())}  # fmt: skip


def composition_fields(
    loaded: LoadedModel, req: CompositionRequest, plan: CompositionPlan,
    should_stop: ShouldStop = None,
) -> dict:  # fmt: skip
    try:
        found = model_composition(loaded)
    except TraceRefused as err:
        raise InvalidInput(str(err)) from None
    if should_stop is not None and should_stop():
        raise RequestCancelled()
    focus = None
    if req.focus is not None:
        b, j = req.focus.layer, req.focus.head
        scores = [found.composition.scores[k][:b, :, b, j].tolist() for k in plan.kinds]
        focus = {"layer": b, "head": j, "scores": scores}
    fields = {
        "model": loaded.id,
        "layers": loaded.arch.num_layers,
        "heads": loaded.arch.num_heads,
        "kv_heads": loaded.arch.num_kv_heads,
        "kinds": plan.kinds,
        "edges": _edges(found, plan.kinds, req.top),
        "summary": [_summary(found, k) for k in plan.kinds],
        "focus": focus,
        "seconds": found.weights_seconds + found.scores_seconds,
        "convention": CONVENTION,
    }
    return in_order(fields, CompositionResponse)


def composition(
    passes: Passes, req: CompositionRequest, should_stop: ShouldStop = None
) -> tuple[bytes, Reservation]:
    """A CompositionResponse as JSON and its bytes' reservation (released once sent)."""
    loaded = passes.model(req.model)
    plan = plan_composition(loaded, req)
    return answered(
        passes, plan.answer_bytes, plan.held_bytes,
        lambda: composition_fields(loaded, req, plan, should_stop),
    )  # fmt: skip


def computed_already(passes: Passes, model_id: str) -> bool:
    """Whether the model is loaded and its scores computed (a request then only reads them)."""
    loaded = passes.manager.loaded_or_none(model_id)
    return loaded is not None and cached_composition(loaded) is not None


def composition_status(passes: Passes, model_id: str) -> CompositionStatus:
    """How far the model's scores have come; ModelNotFound (404) for an id the server lacks.
    Reads two dictionaries: never loads or computes anything."""
    passes.manager.state(model_id)  # the id is known
    loaded = passes.manager.loaded_or_none(model_id)
    if loaded is None:
        return CompositionStatus(
            model=model_id, state="not computed", stage="the model is not loaded", fraction=0.0
        )
    if cached_composition(loaded) is not None:
        return CompositionStatus(model=model_id, state="ready", stage="computed", fraction=1.0)
    found = composition_progress(loaded)
    if found is None:
        return CompositionStatus(
            model=model_id, state="not computed", stage="not asked for yet", fraction=0.0
        )
    stage, fraction = found
    return CompositionStatus(
        model=model_id, state="computing", stage=stage, fraction=min(1.0, max(0.0, fraction))
    )
