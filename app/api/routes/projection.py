"""One head's queries, keys, values and outputs over a corpus run's tokens, in 2-D: the head
page's projection panel (HeadVis's projection)."""

from fastapi import APIRouter, Request

from app.api.responses import BODY_ROUTE, errors
from app.api.routes.corpus import Index, RunId, StoreDep
from app.api.running import FIRST_LOAD_SECONDS, LaneCost, until_disconnect
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep
from atlas_engine.compute import Lane
from atlas_engine.corpus.store import reading
from atlas_engine.schemas.projection import (
    MAX_PROJECTION_TOKENS,
    ProjectionRequest,
    ProjectionResponse,
)
from atlas_engine.services.projection import head_projection, projection_run, projection_seconds

router = APIRouter(prefix="/api/corpus", tags=["corpus"], route_class=StrictJSONRoute)


@router.post(
    "/{run_id}/heads/{layer}/{head}/projection",
    response_model=ProjectionResponse,
    summary="One head's queries, keys, values and outputs over a corpus, in 2-D",
    description="A seeded sample of the run's texts, `tokens` of them at most "
    f"({MAX_PROJECTION_TOKENS} at most), counted before any pass, is run through the model "
    "(each pass cached as the explorer's are); the head's layer is replayed from each pass for "
    "its per-token query (after RoPE and any q norm), key and value (the key/value head the "
    "query head reads, under GQA) and output (Σ_j α_ij v_j, its slice of the output "
    "projection's input, before o_proj). Queries and keys are moved as AttentionViz does "
    "(queries × s, keys ÷ s, keys onto the queries' centroid: no weight changes), then "
    "projected together by a centred PCA (or UMAP, where installed), so a query near a key "
    "means a large score; values and outputs get a plane each. Each PCA axis's share of the "
    "variance is given. 404: no such run, or its model is not served here; 422: an imported "
    "HeadVis run (no texts), a layer or head the model lacks, UMAP where not installed, a "
    "model whose heads are not replayed.",
    responses=errors(*BODY_ROUTE, 404),
)
async def post_projection(
    body: ProjectionRequest,
    passes: PassesDep,
    store: StoreDep,
    request: Request,
    run_id: RunId,
    layer: Index,
    head: Index,
) -> ProjectionResponse:
    with reading(store):
        run = projection_run(store, run_id, layer, head)
        loaded = passes.manager.loaded_or_none(run.model)
        seconds = FIRST_LOAD_SECONDS if loaded is None else projection_seconds(loaded, run, body)
        return await until_disconnect(
            request,
            lambda stop: head_projection(passes, store, run_id, layer, head, body, stop),
            LaneCost(Lane.HEAVY, seconds, run.model),
        )
