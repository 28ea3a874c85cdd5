"""Why heads attend and which heads work together: one attention score taken apart into the
residual stream's pieces, and edges between heads."""

from fastapi import APIRouter, Request, Response

from app.api.responses import BODY_ROUTE, errors
from app.api.running import heavy, reserved_json, until_disconnect
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep
from atlas_engine.schemas.circuit import MAX_CIRCUIT_TOKENS, CircuitRequest, CircuitResponse
from atlas_engine.schemas.trace import MAX_TRACE_TOKENS, TraceRequest, TraceResponse
from atlas_engine.services.circuit import circuit
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


@router.post(
    "/circuit",
    response_model=CircuitResponse,
    summary="Which heads work together: edges between heads, on a text or a patched pair",
    description="Edges from every earlier head into every later head's query, key or value, the "
    "strongest first. by=text: the share of a later head's attention-weighted score (through "
    "its queries or its keys) or of its output (through its values) that the earlier head "
    "wrote on this text, every norm frozen as in /trace; `focus` answers one head's inputs in "
    "full (every head, MLP, embedding and the bias terms). by=weights: Elhage et al.'s Q-, K- "
    "and V-composition from the weights alone, less random heads' score (once per model). "
    "by=edges: edge attribution patching "
    "between `text` (clean) and `corrupted` for Patching's metric, logit(target) - "
    "logit(contrast) at a position: the share of clean - corrupted each edge carries, to first "
    "order (one forward and one backward pass of the corrupted text; decoders with a "
    "language-model head whose blocks add to the stream). At most "
    f"{MAX_CIRCUIT_TOKENS} tokens a text.",
    responses=ERRORS,
)
async def post_circuit(body: CircuitRequest, passes: PassesDep, request: Request) -> Response:
    cost = {"text": 2.0, "weights": 1.0, "edges": 5.0}[body.by]
    return reserved_json(
        await until_disconnect(
            request, lambda stop: circuit(passes, body, stop), heavy(passes, body, cost)
        )
    )
