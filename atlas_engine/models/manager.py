"""Models load once, lazily, behind a lock; the least recently used is unloaded past a bound."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from atlas_engine import timing
from atlas_engine.errors import ModelUnavailable, UnknownModel
from atlas_engine.models.loader import LoadedModel, load_model
from atlas_engine.models.placement import CPU_FLOAT32, Placement, resolve_placement
from atlas_engine.models.registry import ModelSpec, build_registry
from atlas_engine.models.sources import family_of, hub_reachable, read_config, unavailable_reason
from atlas_engine.suggest import close_matches, did_you_mean


@dataclass
class LoadState:
    """What a model is doing now, for the UI's progress display."""

    state: str = "idle"  # idle | loading | ready | failed
    stage: str = ""
    fraction: float = 0.0
    error: str | None = None
    seconds: float | None = None  # how long the last load took


def unknown_model_detail(model_id: str, known: list[str]) -> str:
    """'Unknown model ...', with the nearest known ids (matched whole, or by the name after the
    organisation: 'all-MiniLM-L6-v2'), or every id when none is near."""
    wrong = model_id[:200]
    by_name = {**{k.rsplit("/", 1)[-1]: k for k in known}, **{k: k for k in known}}
    nearest = close_matches(wrong, by_name)
    if nearest:
        return f"Unknown model {wrong!r}; {did_you_mean(nearest)}"
    return f"Unknown model {wrong!r}. Available: {', '.join(sorted(known)) or 'none'}"


class ModelManager:
    def __init__(
        self,
        registry: dict[str, ModelSpec],
        *,
        cache_dir: Path,
        token_limit: int,
        max_loaded: int,
        hub_downloads: bool = False,
        placement: Placement = CPU_FLOAT32,
    ) -> None:
        self.registry = registry
        self.cache_dir = cache_dir
        self.token_limit = token_limit
        self.max_loaded = max_loaded
        self.placement = placement
        self.hub_downloads = hub_reachable(hub_downloads)
        self._loaded: OrderedDict[str, LoadedModel] = OrderedDict()
        self._states: dict[str, LoadState] = {mid: LoadState() for mid in registry}
        self._locks: dict[str, threading.Lock] = {mid: threading.Lock() for mid in registry}
        self._guard = threading.Lock()
        self.load_count: dict[str, int] = dict.fromkeys(registry, 0)

    @classmethod
    def from_settings(cls, settings, max_loaded: int | None = None) -> ModelManager:
        """The manager the settings describe (atlas_engine.config.Settings): the server's, a corpus
        job's, a Dask worker's; max_loaded overrides the settings' count."""
        return cls(
            build_registry(settings.extra_models, settings.allowed_models),
            cache_dir=Path(settings.cache_dir),
            token_limit=settings.max_tokens,
            max_loaded=settings.max_loaded_models if max_loaded is None else max_loaded,
            hub_downloads=settings.hub_downloads,
            placement=resolve_placement(settings.device, settings.dtype),
        )

    def spec(self, model_id: str) -> ModelSpec:
        """The registry entry, or 404 naming what exists. Ids never reach the filesystem."""
        spec = self.registry.get(model_id)
        if spec is None:
            raise UnknownModel(unknown_model_detail(model_id, list(self.registry)))
        return spec

    def state(self, model_id: str) -> LoadState:
        self.spec(model_id)
        return self._states[model_id]

    def is_loaded(self, model_id: str) -> bool:
        return self.loaded_or_none(model_id) is not None

    def loaded_or_none(self, model_id: str) -> LoadedModel | None:
        """The model if it is in memory now; never starts a load."""
        with self._guard:
            return self._loaded.get(model_id)

    def unavailable_reason(self, model_id: str) -> str | None:
        return unavailable_reason(self.spec(model_id), self.hub_downloads)

    def peek_config(self, model_id: str) -> tuple[dict | None, object]:
        spec = self.spec(model_id)
        config = read_config(spec, self.cache_dir)
        return config, family_of(spec, config)

    def get(self, model_id: str) -> LoadedModel:
        """The loaded model, loading it first if needed (concurrent callers load once)."""
        self.spec(model_id)
        with self._guard:
            if model_id in self._loaded:
                self._loaded.move_to_end(model_id)
                return self._loaded[model_id]
        with self._locks[model_id]:
            with self._guard:  # another thread may have finished loading while we waited
                if model_id in self._loaded:
                    self._loaded.move_to_end(model_id)
                    return self._loaded[model_id]
            with timing.timed("load"):
                loaded = self._load(model_id)
            with self._guard:
                self._loaded[model_id] = loaded
                while len(self._loaded) > self.max_loaded:
                    evicted, _ = self._loaded.popitem(last=False)
                    self._states[evicted] = LoadState()
            gc.collect()
            return loaded

    def _load(self, model_id: str) -> LoadedModel:
        state = LoadState(state="loading", stage="starting", fraction=0.0)
        self._states[model_id] = state

        def progress(stage: str, fraction: float) -> None:
            state.stage, state.fraction = stage, fraction

        start = time.perf_counter()
        try:
            loaded = load_model(
                self.spec(model_id),
                cache_dir=self.cache_dir,
                token_limit=self.token_limit,
                progress=progress,
                hub_downloads=self.hub_downloads,
                placement=self.placement,
            )
        except ModelUnavailable as err:
            self._states[model_id] = LoadState(state="failed", error=err.message)
            raise
        self.load_count[model_id] += 1
        self._states[model_id] = LoadState(
            state="ready", stage="ready", fraction=1.0, seconds=time.perf_counter() - start
        )
        return loaded

    def start_loading(self, model_id: str) -> LoadState:
        """Begin loading in a background thread (for the UI); returns the current state."""
        self.spec(model_id)
        if not self.is_loaded(model_id) and self._states[model_id].state != "loading":
            self._states[model_id] = LoadState(state="loading", stage="queued")

            def run() -> None:
                with contextlib.suppress(ModelUnavailable):  # the failure is kept in the state
                    self.get(model_id)

            threading.Thread(target=run, name=f"load-{model_id}", daemon=True).start()
        return self._states[model_id]
