"""Typed dependencies: routes get the model manager and the forward cache from here.

Each is `async def` although it only reads app.state: FastAPI runs a plain `def` dependency in
its thread pool, a hop to another thread and back for every dependency of every request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from atlas_engine.config import Settings
from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.models.manager import ModelManager


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_manager(request: Request) -> ModelManager:
    return request.app.state.manager


async def get_cache(request: Request) -> ForwardCache:
    return request.app.state.forward_cache


async def get_budget(request: Request) -> AnswerBudget:
    return request.app.state.answer_budget


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
ManagerDep = Annotated[ModelManager, Depends(get_manager)]
CacheDep = Annotated[ForwardCache, Depends(get_cache)]
BudgetDep = Annotated[AnswerBudget, Depends(get_budget)]
