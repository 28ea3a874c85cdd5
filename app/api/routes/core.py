from fastapi import APIRouter

from app.api.responses import BODY_ROUTE, errors
from app.api.strict_json import StrictJSONRoute
from atlas_engine.compute import Lane, run_on_compute
from atlas_engine.schemas.core import CoreAttentionRequest, CoreAttentionResponse
from atlas_engine.services.core_attention import run_core_attention

router = APIRouter(prefix="/api/core", tags=["attention_core"], route_class=StrictJSONRoute)


@router.post(
    "/attention",
    response_model=CoreAttentionResponse,
    summary="Run the from-scratch attention on your own Q, K, V",
    responses=errors(*BODY_ROUTE),
)
async def core_attention(body: CoreAttentionRequest) -> CoreAttentionResponse:
    """Scaled dot-product attention with every stage returned: raw scores, scaled scores,
    masked scores (null = -inf), softmax weights and output. At most 64 tokens and 256 dims."""
    return await run_on_compute(run_core_attention, body, lane=Lane.QUICK)
