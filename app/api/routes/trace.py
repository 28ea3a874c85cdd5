"""Why heads attend: one attention score taken apart into the residual stream's pieces."""

from fastapi import APIRouter, Request, Response

from app.api.responses import BODY_ROUTE, errors
from app.api.running import heavy, reserved_json, until_disconnect
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep
from atlas_engine.schemas.trace import MAX_TRACE_TOKENS, TraceRequest, TraceResponse
from atlas_engine.services.score_trace import score_trace

router = APIRouter(prefix="/api/attention", tags=["why heads attend"], route_class=StrictJSONRoute)
ERRORS = errors(*BODY_ROUTE, 404, 503)


@router.post(
    "/trace",
    response_model=TraceResponse,
    summary="Trace one attention score into the pieces of the stream that made it",
    description="For one head's pre-softmax score from a query position to a key: the layer's "
    "input is a sum of pieces (the embeddings, every earlier head's and MLP's output, bias "
    "terms); with every norm's scale frozen at its value on the real pass, the query and the "
    "key are linear in them and the score is a sum over (query piece, key piece) pairs. Answers "
    "each piece's part through the query and through the key, the pairs of the largest pieces "
    "as a matrix, the largest pairs in words, and the same for score(key) - score(contrast). "
    "The parts sum to the real score within `bound`. Every family the capture path replays, "
    "encoders included; a model whose stream does not add up is refused by name (422), as is a "
    "key the query may not read. About one forward pass up to the layer and two replays of it; "
    f"at most {MAX_TRACE_TOKENS} tokens.",
    responses=ERRORS,
)
async def post_trace(body: TraceRequest, passes: PassesDep, request: Request) -> Response:
    return reserved_json(
        await until_disconnect(
            request, lambda stop: score_trace(passes, body, stop), heavy(passes, body, 2.0)
        )
    )
