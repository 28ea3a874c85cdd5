"""What heads write: the logit lens, direct logit attribution and patching from a second text."""

from fastapi import APIRouter, Request, Response
from starlette.responses import StreamingResponse

from app.api.responses import BODY_ROUTE, errors, ndjson_lines
from app.api.running import (
    heavy,
    progress_stream,
    reserved_json,
    run_with_room,
    until_disconnect,
)
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep
from atlas_engine.schemas.forward import ForwardFailed, ForwardProgress
from atlas_engine.schemas.writes import (
    MAX_PATCH_TOKENS,
    MAX_WRITES_TOKENS,
    AttributionRequest,
    AttributionResponse,
    LensRequest,
    LensResponse,
    PatchingRequest,
    PatchingResponse,
)
from atlas_engine.services import patching
from atlas_engine.services.attribution import attribution
from atlas_engine.services.lens import lens

router = APIRouter(prefix="/api/attention", tags=["what heads write"], route_class=StrictJSONRoute)
ERRORS = errors(*BODY_ROUTE, 404, 503)
NEEDS = (
    " Decoders with a language-model head whose layers add to the residual stream (every "
    "pre-norm family the capture path replays); a model without one is refused by name."
)


@router.post(
    "/lens",
    response_model=LensResponse,
    summary="The logit lens: every layer's residual stream read as the last",
    description="The residual stream entering the first layer and after every layer, at every "
    "predicted position (a masked LM: its mask tokens), put through the model's final norm and "
    "its language-model head: each cell's top-k and the probability and rank of one token (the "
    "model's own top guess at the last position by default). The last row equals the model's "
    f"own predictions. One forward pass; at most {MAX_WRITES_TOKENS} tokens.",
    responses=ERRORS,
)
async def post_lens(body: LensRequest, passes: PassesDep, request: Request) -> Response:
    return reserved_json(
        await until_disconnect(
            request, lambda stop: lens(passes, body, stop), heavy(passes, body, 3.0)
        )
    )


@router.post(
    "/attribution",
    response_model=AttributionResponse,
    summary="Direct logit attribution: what each head writes toward a token",
    description="Each head's, each MLP's and the embeddings' direct contribution to the logit "
    "of a target token (or the difference from a contrast token) at one position, with the "
    "final norm's scale frozen at its value on the real pass (TransformerLens's convention); "
    "with the bias terms they sum to the real logit (`total` against `logit`). `source` splits "
    "one head's contribution by the key it read. One forward pass; at most "
    f"{MAX_WRITES_TOKENS} tokens." + NEEDS,
    responses=ERRORS,
)
async def post_attribution(
    body: AttributionRequest, passes: PassesDep, request: Request
) -> Response:
    return reserved_json(
        await until_disconnect(
            request,
            lambda stop: attribution(passes, body, stop),
            heavy(passes, body, 1.5),
        )
    )


@router.post(
    "/patching",
    response_model=PatchingResponse,
    summary="Attribution patching from a second text (instant)",
    description="The metric logit(target) - logit(contrast) at a position, on a clean text and "
    "a corrupted one that line up token by token; for every head's output and the residual "
    "stream after every layer at every position, the share of clean - corrupted that copying "
    "it from the clean run would recover, by the gradient approximation (one forward and one "
    "backward pass of the corrupted text). POST /api/attention/patching/exact computes the "
    f"same grids exactly. At most {MAX_PATCH_TOKENS} tokens a text." + NEEDS,
    responses=ERRORS,
)
async def post_patching(body: PatchingRequest, passes: PassesDep, request: Request) -> Response:
    return reserved_json(
        await until_disconnect(
            request,
            lambda stop: patching.attribution(passes, body, stop),
            heavy(passes, body, 6.0),
        )
    )


@router.post(
    "/patching/exact",
    summary="Exact patching from a second text, streaming its progress",
    description="As POST /api/attention/patching, but each component is copied from the clean "
    "run into a rerun of the corrupted text (a layer's heads, or a layer's positions, in "
    "batches of at most 1,024 tokens). Streams `application/x-ndjson`: a progress line as each "
    "layer starts (`layer` done of `layers`, the heads' layers first), then the answer "
    "(`event` 'done', the fields of PatchingResponse) or an error line (503: the server shut "
    "down). Every rule is checked, and the run admitted to the compute lane, before the "
    "stream starts: a refusal is the answer's own status. Short jobs run between two reruns; "
    "closing the connection stops the run at the next." + NEEDS,
    response_class=StreamingResponse,
    responses={
        **ERRORS,
        200: ndjson_lines(
            "One JSON object per line: ForwardProgress lines, then PatchingDone or ForwardFailed",
            ForwardProgress,
            patching.PatchingDone,
            ForwardFailed,
        ),
    },
)
async def post_patching_exact(body: PatchingRequest, passes: PassesDep) -> StreamingResponse:
    job = await run_with_room(patching.check_exact, passes, body, cost=heavy(passes, body, 2.0))
    return progress_stream(
        lambda stop, progress: patching.exact(job, body, stop, progress),
        heavy(passes, body, job.sequences),
        held=job.held,
    )
