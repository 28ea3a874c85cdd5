from fastapi import APIRouter, Path, Query

from app.api.responses import errors
from app.api.strict_json import StrictJSONRoute
from app.deps import PassesDep
from atlas_engine.compute import run_on_compute
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID
from atlas_engine.schemas.composition import CompositionStatus
from atlas_engine.schemas.models import InductionText, LoadStatus, ModelList
from atlas_engine.services.composition import composition_status
from atlas_engine.services.induction import induction_text
from atlas_engine.services.models import describe
from atlas_engine.services.passes import Passes
from atlas_engine.services.qkspace import projection_methods

router = APIRouter(prefix="/api/models", tags=["models"], route_class=StrictJSONRoute)

ModelIdPath = Path(description="A model id from GET /api/models.", max_length=300)


@router.get(
    "", response_model=ModelList, summary="Models this server knows", responses=errors(413, 429)
)
def list_models(passes: PassesDep) -> ModelList:
    """Every model on the operator's allow-list, whether it can be loaded here and why not."""
    manager = passes.manager
    return ModelList(
        models=[describe(manager, model_id) for model_id in manager.registry],
        default_encoder=MINILM_ID,
        default_decoder=SMOLLM2_ID,
        device=manager.placement.device.type,
        dtype=manager.placement.dtype_name,
        projections=projection_methods(),
    )


def _status(passes: Passes, model_id: str) -> LoadStatus:
    state = passes.manager.state(model_id)
    return LoadStatus(
        id=model_id,
        state=state.state,
        stage=state.stage,
        fraction=state.fraction,
        error=state.error,
        seconds=state.seconds,
    )


NOT_FOUND = errors(
    404, 413, 422, 429, e404="No such model on this server.", e422="The model id is too long."
)


@router.get(
    "/{model_id:path}/status",
    response_model=LoadStatus,
    summary="How far a model's loading has come",
    responses=NOT_FOUND,
)
def load_status(passes: PassesDep, model_id: str = ModelIdPath) -> LoadStatus:
    """Loading progress of one model (poll it after POST .../load)."""
    return _status(passes, model_id)


@router.get(
    "/{model_id:path}/composition",
    response_model=CompositionStatus,
    summary="How far scoring every pair of a model's heads has come",
    responses=NOT_FOUND,
)
def composition_state(passes: PassesDep, model_id: str = ModelIdPath) -> CompositionStatus:
    """POST /api/attention/composition (and the circuit from the weights) scores every pair of
    a model's heads once per loaded model, in seconds (SmolLM2: about 5); poll this meanwhile
    for the stage and the share done. Never starts a load or the computation."""
    return composition_status(passes, model_id)


@router.post(
    "/{model_id:path}/load",
    response_model=LoadStatus,
    status_code=202,
    summary="Start loading a model",
    responses=NOT_FOUND,
)
def start_load(passes: PassesDep, model_id: str = ModelIdPath) -> LoadStatus:
    """Start loading a model in the background; returns at once."""
    passes.manager.start_loading(model_id)
    return _status(passes, model_id)


@router.get(
    "/{model_id:path}/induction-text",
    response_model=InductionText,
    responses=errors(404, 413, 422, 429, 503),
    summary="The standard test input for induction heads",
)
async def get_induction_text(
    passes: PassesDep,
    model_id: str = ModelIdPath,
    length: int = Query(
        40, ge=4, le=2000, description="Random tokens before the repeat (twice as many in all)."
    ),
    seed: int = Query(0, ge=0, le=2**31 - 1, description="The same seed gives the same text."),
) -> InductionText:
    """A random sequence of this model's tokens written twice. In the second copy an
    induction head attends to the token that followed the previous occurrence of the current
    one; POST the text to /api/attention/heads and look at the 'induction' statistic."""

    def draw() -> InductionText:  # a first use loads the model, on the heavy lane
        loaded = passes.model(model_id)
        text = induction_text(loaded, length, seed)
        return InductionText(model=loaded.id, length=length, seed=seed, text=text)

    return await run_on_compute(draw)
