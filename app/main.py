"""The ASGI app: `uvicorn app.main:app`."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.api.routes import core, health
from app.config import Settings, get_settings
from app.errors import install_error_handlers
from app.security import SecurityHeadersMiddleware
from app.web import pages
from app.web.assets import STATIC_DIR


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(
        title="Attention Atlas",
        version="0.1.0",
        description="See how transformer attention works and what real models attend to.",
    )
    app.state.settings = settings
    install_error_handlers(app)
    app.add_middleware(SecurityHeadersMiddleware)
    app.include_router(health.router)
    app.include_router(core.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


app = create_app()
