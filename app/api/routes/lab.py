from fastapi import APIRouter

from app.api.responses import BODY_ROUTE, errors
from app.schemas.lab import MasksRequest, MasksResponse, ScalingRequest, ScalingResponse
from app.services.lab import all_masks, scaling_demo

router = APIRouter(prefix="/api/lab", tags=["lab"])

ERRORS = errors(*BODY_ROUTE)


@router.post(
    "/masks", response_model=MasksResponse, responses=ERRORS, summary="Every mask on n tokens"
)
def masks(body: MasksRequest) -> MasksResponse:
    """Causal, sliding window, dilated, global, random, BigBird and block-sparse masks from
    attention_core, each with its cost in computed (query, key) pairs against full attention."""
    return all_masks(body)


@router.post(
    "/scaling",
    response_model=ScalingResponse,
    responses=ERRORS,
    summary="Scaled vs unscaled softmax",
)
def scaling(body: ScalingRequest) -> ScalingResponse:
    """Random q and k with unit-variance components: the softmax of q·k with and without the
    1/sqrt(d_k) scale, with entropy, max weight, effective tokens and the Jacobian norm, the
    empirical variance of q·k, and mean entropy against d_k."""
    return scaling_demo(body)
