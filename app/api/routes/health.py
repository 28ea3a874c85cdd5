from fastapi import APIRouter

from app.api.strict_json import StrictJSONRoute
from app.deps import SettingsDep
from atlas_engine.corpus.store import set_aside_note
from atlas_engine.schemas.common import Health

router = APIRouter(prefix="/api", tags=["health"], route_class=StrictJSONRoute)


# HEAD is what many load balancers' and monitors' checks send. It is a route of its own (one
# route of both methods has one operation id for two operations), left out of the schema as
# HTTP's implicit method, and after GET, whose methods a 405 for OPTIONS then lists in Allow.
@router.head("/health", include_in_schema=False)
@router.get(
    "/health", response_model=Health, response_model_exclude_none=True, summary="Liveness check"
)
async def health(settings: SettingsDep) -> Health:
    """Answers at once, even while models load or long requests run; names what needs an
    operator's eye (a corpus store that could not be read and was moved aside)."""
    return Health(status="ok", corpus_store=set_aside_note(settings.corpus_store))
