"""The ASGI app. Serve it with `python -m app` (app/__main__.py), which also gives uvicorn the
server's HTTP protocol (app/transport.py: a deadline for each request head, caps on open
connections, unread bodies drained); plain `uvicorn app.main:app` serves the same app without
them."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from starlette_compress import CompressMiddleware, add_compress_type
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import timing as server_timing
from app.admission import AdmissionContext
from app.api.routes import (
    attention,
    composition,
    core,
    corpus,
    health,
    images,
    lab,
    lessons,
    models,
    projection,
    trace,
    writes,
)
from app.errors import install_error_handlers
from app.framing import OneBodyLength
from app.limits import RateLimit, RequestBodyGuard, SendGuard
from app.memory import return_freed_memory_to_the_os
from app.security import SecurityHeadersMiddleware
from app.web import pages
from app.web.assets import STATIC_DIR
from atlas_engine.admission import QueueLimits
from atlas_engine.compute import call_on_compute
from atlas_engine.config import Settings, get_settings
from atlas_engine.corpus.background import BackgroundCorpus
from atlas_engine.errors import AtlasError
from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.forward import warm_up
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.models.manager import ModelManager
from atlas_engine.serialize import BINARY_MEDIA_TYPE
from atlas_engine.services.passes import Passes
from atlas_engine.services.training import register_saved
from atlas_engine.vision.images import MAX_IMAGE_BYTES

log = logging.getLogger("attention_atlas")

# The fastest level of each encoding: bench/compression.py measured that on real maps they keep
# nearly all the saving of higher levels (u8 at 512 tokens: zstd-1 0.140 bytes a weight in 62 ms,
# zstd-4 0.142 in 79 ms; gzip-6 0.132 in 1,148 ms), so each costs less than it saves.
COMPRESSION = {"zstd_level": 1, "brotli_quality": 1, "gzip_level": 1}
# Attention maps in our binary layout compress about 7x as u8 (JSON is on the list already).
# The standard float32 containers (safetensors, npy) are not listed: float mantissas are noise
# to a compressor (8 % saved at best), which costs more than it saves on a fast network.
add_compress_type(BINARY_MEDIA_TYPE)


def _preload(manager: ModelManager, model_ids: list[str]) -> None:
    """Load each model, then run it once on the heavy lane (warm_up), so that the first
    request pays for neither."""
    for model_id in model_ids:
        try:
            loaded = manager.get(model_id)
        except AtlasError as err:
            log.warning("preloading %s failed: %s", model_id, err.message)
            continue
        try:
            call_on_compute(warm_up, loaded)
        except Exception:  # its first request will say what is wrong, as an answer
            log.exception("a first pass of %s failed", model_id)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    preload = [m for m in settings.preload if m in app.state.manager.registry]
    if preload:
        threading.Thread(target=_preload, args=(app.state.manager, preload), daemon=True).start()
    app.state.corpus_job.start()
    try:
        yield
    finally:
        app.state.corpus_job.stop()


def corpus_job(settings: Settings, manager: ModelManager) -> BackgroundCorpus:
    """The corpus job beside the server (settings.corpus_texts texts of each model; none by
    default: `make run` asks for it)."""
    models = [m for m in settings.corpus_models if m in manager.registry]
    return BackgroundCorpus(
        manager.get,
        Path(settings.corpus_store),
        models,
        settings.corpus_texts,
        corpus=settings.corpus_source,
    )


def queue_limits(settings: Settings) -> QueueLimits:
    return QueueLimits(
        heavy_jobs=settings.queue_heavy_jobs,
        heavy_seconds=settings.queue_heavy_seconds,
        per_client_jobs=settings.queue_per_client_jobs,
        quick_jobs=settings.queue_quick_jobs,
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    return_freed_memory_to_the_os()
    app = FastAPI(
        title="Attention Atlas",
        version="0.1.0",
        description="See how transformer attention works and what real models attend to.",
        lifespan=lifespan,
        docs_url=None,  # served by app.web.pages from local files, not FastAPI's CDN pages
        redoc_url=None,
    )
    app.state.settings = settings
    log.setLevel(settings.log_level.upper())
    if not log.handlers:  # uvicorn configures only its own loggers
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        log.addHandler(handler)
    app.state.manager = ModelManager.from_settings(settings)
    register_saved(Path(settings.trained_dir), app.state.manager)  # the lab's trained models
    app.state.forward_cache = ForwardCache(
        settings.forward_cache_entries, settings.forward_cache_bytes
    )
    app.state.answer_budget = AnswerBudget(settings.inflight_bytes, settings.inflight_wait_seconds)
    app.state.corpus_job = corpus_job(settings, app.state.manager)
    app.state.passes = Passes(app.state.manager, app.state.forward_cache, app.state.answer_budget)
    install_error_handlers(app, not_found_page=pages.not_found_page)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "X-Atlas-Key"],  # the page's routing key (api.js)
            expose_headers=[server_timing.HEADER],  # a page there may read where time went
        )
    app.add_middleware(AdmissionContext, limits=queue_limits(settings))  # the lanes' admission
    app.add_middleware(
        RequestBodyGuard,
        max_bytes=settings.max_body_bytes,
        timeout=settings.body_timeout_seconds,
        budget=app.state.answer_budget,
        uploads={
            "/api/corpus/import": (settings.max_import_bytes, "ATLAS_MAX_IMPORT_BYTES"),
            "/api/image/attention": (MAX_IMAGE_BYTES, "an image's MAX_IMAGE_BYTES"),
        },
    )
    # Outside the body guard: every request is counted, those it refuses (503, 408, 413) too.
    app.add_middleware(RateLimit, per_minute=settings.rate_limit_per_minute)
    if settings.trusted_proxies:  # only their X-Forwarded-For names the client
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    app.add_middleware(OneBodyLength)  # before any body is read
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(CompressMiddleware, **COMPRESSION)
    app.add_middleware(SendGuard, timeout=settings.send_timeout_seconds)
    server_timing.install(app)  # the outermost middleware: every /api/ answer is timed
    app.include_router(health.router)
    app.include_router(core.router)
    app.include_router(models.router)
    app.include_router(attention.router)
    app.include_router(writes.router)
    app.include_router(trace.router)
    app.include_router(composition.router)
    app.include_router(corpus.router)
    app.include_router(projection.router)
    app.include_router(lab.router)
    app.include_router(images.router)
    app.include_router(lessons.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


app = create_app()
