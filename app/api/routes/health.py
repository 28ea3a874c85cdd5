from fastapi import APIRouter

from app.schemas.common import Health

router = APIRouter(prefix="/api", tags=["health"])


@router.get("/health", response_model=Health, summary="Liveness check")
async def health() -> Health:
    """Answers at once, even while models load or long requests run."""
    return Health(status="ok")
