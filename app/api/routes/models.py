from fastapi import APIRouter, Path

from app.api.responses import errors
from app.deps import ManagerDep
from app.models.families import architecture_from_dict
from app.models.registry import MINILM_ID, SMOLLM2_ID, Source
from app.schemas.models import LoadStatus, ModelInfo, ModelList

router = APIRouter(prefix="/api/models", tags=["models"])

ModelIdPath = Path(description="A model id from GET /api/models.", max_length=300)


def describe(manager: ManagerDep, model_id: str) -> ModelInfo:
    """What we know of a model without loading it (config.json when it is on this machine)."""
    spec = manager.spec(model_id)
    reason = manager.unavailable_reason(model_id)
    loaded = manager.loaded_or_none(model_id)
    if loaded is not None:
        family, arch = loaded.family, loaded.arch
    else:
        config, family = manager.peek_config(model_id)
        arch = architecture_from_dict(config, family) if config and family else None
    return ModelInfo(
        id=spec.id,
        family=family.value if family else None,
        causal=family.causal if family else None,
        num_layers=arch.num_layers if arch else None,
        num_heads=arch.num_heads if arch else None,
        num_kv_heads=arch.num_kv_heads if arch else None,
        max_tokens=min(arch.max_positions, manager.token_limit) if arch else None,
        available=reason is None,
        unavailable_reason=reason,
        loaded=loaded is not None,
        embedded=spec.source in (Source.MINILM_PACKAGE, Source.SMOLLM2_PACKAGE),
        description=spec.description,
    )


@router.get(
    "", response_model=ModelList, summary="Models this server knows", responses=errors(413, 429)
)
def list_models(manager: ManagerDep) -> ModelList:
    """Every model on the operator's allow-list, whether it can be loaded here and why not."""
    return ModelList(
        models=[describe(manager, model_id) for model_id in manager.registry],
        default_encoder=MINILM_ID,
        default_decoder=SMOLLM2_ID,
    )


def _status(manager: ManagerDep, model_id: str) -> LoadStatus:
    state = manager.state(model_id)
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


@router.get("/{model_id:path}/status", response_model=LoadStatus, responses=NOT_FOUND)
def load_status(manager: ManagerDep, model_id: str = ModelIdPath) -> LoadStatus:
    """Loading progress of one model (poll it after POST .../load)."""
    return _status(manager, model_id)


@router.post(
    "/{model_id:path}/load", response_model=LoadStatus, status_code=202, responses=NOT_FOUND
)
def start_load(manager: ManagerDep, model_id: str = ModelIdPath) -> LoadStatus:
    """Start loading a model in the background; returns at once."""
    manager.start_loading(model_id)
    return _status(manager, model_id)
