"""Typed dependencies: routes get the settings and the process's forward passes (the loaded
models, the cache of passes and the in-flight budget, as one atlas_engine Passes) from here.

Each is `async def` although it only reads app.state: FastAPI runs a plain `def` dependency in
its thread pool, a hop to another thread and back for every dependency of every request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from atlas_engine.config import Settings
from atlas_engine.corpus.background import BackgroundCorpus
from atlas_engine.services.passes import Passes


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_passes(request: Request) -> Passes:
    return request.app.state.passes


async def get_corpus_job(request: Request) -> BackgroundCorpus:
    return request.app.state.corpus_job


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
PassesDep = Annotated[Passes, Depends(get_passes)]
CorpusJobDep = Annotated[BackgroundCorpus, Depends(get_corpus_job)]
