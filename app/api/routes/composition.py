"""How heads compose, from the weights alone: Q-, K- and V-composition between every earlier
and every later head."""

from fastapi import APIRouter, Request, Response

from app.api.responses import BODY_ROUTE, errors
from app.api.running import FIRST_LOAD_SECONDS, LaneCost, reserved_json, until_disconnect
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep
from atlas_engine.compute import Lane
from atlas_engine.schemas.composition import (
    MAX_COMPOSITION_EDGES,
    CompositionRequest,
    CompositionResponse,
)
from atlas_engine.services.composition import composition, computed_already
from atlas_engine.services.passes import Passes

router = APIRouter(prefix="/api/attention", tags=["why heads attend"], route_class=StrictJSONRoute)
ERRORS = errors(*BODY_ROUTE, 404, 503)
COMPOSITION_SECONDS = 10.0
"""What scoring every pair of a model's heads is taken to cost on the heavy lane, the first
time (SmolLM2: 1 s for its weights, 5 s for the scores, docs/performance.md)."""


def lane(passes: Passes, body: CompositionRequest) -> LaneCost:
    """The quick lane where the model's scores are kept, else the heavy lane (its first load
    counted as a first load)."""
    if computed_already(passes, body.model):
        return LaneCost(Lane.QUICK)
    loaded = passes.manager.loaded_or_none(body.model)
    seconds = COMPOSITION_SECONDS if loaded is not None else FIRST_LOAD_SECONDS
    return LaneCost(Lane.HEAVY, seconds, body.model)


@router.post(
    "/composition",
    response_model=CompositionResponse,
    summary="How heads compose, from the weights: Q-, K- and V-composition of every pair",
    description="For every earlier head A and later head B, Elhage et al.'s (2021) composition "
    "scores read off the weights alone, no text: how much of what A writes (W_OV^A) B's "
    "queries (Q), keys (K) or values (V) read, as ‖W_QK^B^T W_OV^A‖, ‖W_QK^B W_OV^A‖ and "
    "‖W_OV^B W_OV^A‖ over the two matrices' norms, each against the mean score of Gaussian "
    "random heads of the same shapes (the baseline). Each layer's input norm is folded in "
    "(scale 1), RoPE's rotation and biases are left out. Answers the `top` edges (at most "
    f"{MAX_COMPOSITION_EDGES}) that most exceed their baseline, each kind's summary and, with "
    "`focus`, one later head's scores from every earlier head. Computed once per loaded model "
    "(SmolLM2: seconds), then read. Every family the capture path replays whose blocks it can "
    "lay out; another is refused by name (422), as is a focus in layer 0.",
    responses=ERRORS,
)
async def post_composition(
    body: CompositionRequest, passes: PassesDep, request: Request
) -> Response:
    return reserved_json(
        await until_disconnect(
            request, lambda stop: composition(passes, body, stop), lane(passes, body)
        )
    )
