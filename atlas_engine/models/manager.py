"""Models load once, lazily, behind a lock; the least recently used is unloaded past a bound.

The bound is in bytes as well as in models: a model is sized from its files before any of it
is loaded (atlas_engine.models.sizing), one larger than ATLAS_MODEL_BYTES alone is refused,
and the least recently used are unloaded until the new one fits beside the rest. A model
unloaded while a request still runs it is counted until that request lets it go. A load that
fails is remembered, with its reason, until the model's files change: every request after it
gets that reason at once, and nothing it allocated is kept.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from atlas_engine import timing
from atlas_engine.errors import ModelUnavailable, ServerBusy, UnknownModel
from atlas_engine.models.loader import LoadedModel, load_model
from atlas_engine.models.placement import CPU_FLOAT32, Placement, resolve_placement
from atlas_engine.models.registry import ModelSpec, Source, build_registry
from atlas_engine.models.sizing import ModelSize, model_size
from atlas_engine.models.sources import (
    GGUF_SOURCES,
    ConversionNeeded,
    family_of,
    files_fingerprint,
    hub_reachable,
    read_config,
    unavailable_reason,
)
from atlas_engine.suggest import close_matches, did_you_mean

MiB = 2**20
UNLOAD_WAIT_SECONDS = 10.0
"""How long a load waits for requests still running a model it unloaded to let it go, before
answering 503 busy (the memory both would hold does not fit ATLAS_MODEL_BYTES)."""


@dataclass
class LoadState:
    """What a model is doing now, for the UI's progress display."""

    state: str = "idle"  # idle | loading | ready | failed
    stage: str = ""
    fraction: float = 0.0
    error: str | None = None
    seconds: float | None = None  # how long the last load took


@dataclass
class _Held:
    """A loaded model's share of the bytes, or an unloaded one's while anything still holds
    one of its tensors (weak references: a request that still runs it, a cached pass)."""

    model_id: str
    nbytes: int
    tensors: list[weakref.ref] = field(default_factory=list)

    def alive(self) -> bool:
        return any(ref() is not None for ref in self.tensors)


def _tensor_refs(loaded: LoadedModel) -> list[weakref.ref]:
    whole = next(m for m in (loaded.predictor, loaded.seq2seq, loaded.model) if m is not None)
    return [weakref.ref(t) for t in (*whole.parameters(), *whole.buffers())]


def give_back_freed_heap() -> None:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim), where there is glibc."""
    name = ctypes.util.find_library("c")
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(name).malloc_trim(0)


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
        model_bytes: int | None = None,
    ) -> None:
        self.registry = registry
        self.cache_dir = cache_dir
        self.token_limit = token_limit
        self.max_loaded = max_loaded
        self.model_bytes = model_bytes  # None: no bound in bytes (the library, tests)
        self.placement = placement
        self.hub_downloads = hub_reachable(hub_downloads)
        self._loaded: OrderedDict[str, LoadedModel] = OrderedDict()
        self._states: dict[str, LoadState] = {mid: LoadState() for mid in registry}
        self._locks: dict[str, threading.Lock] = {mid: threading.Lock() for mid in registry}
        self._guard = threading.Lock()
        self.load_count: dict[str, int] = dict.fromkeys(registry, 0)
        self._held: dict[str, _Held] = {}  # loaded models' bytes, and models being loaded
        self._unloaded: list[_Held] = []  # unloaded models that something may still hold
        self._failures: dict[str, tuple[tuple | None, str]] = {}  # files then, the reason
        self._on_unload: list[Callable[[str], None]] = []

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
            model_bytes=settings.model_bytes,
        )

    def on_unload(self, callback: Callable[[str], None]) -> None:
        """Call `callback(model_id)` each time a model is unloaded (the forward cache forgets
        its passes, whose recorded layer calls hold the model's modules)."""
        self._on_unload.append(callback)

    def spec(self, model_id: str) -> ModelSpec:
        """The registry entry, or 404 naming what exists. Ids never reach the filesystem."""
        spec = self.registry.get(model_id)
        if spec is None:
            raise UnknownModel(unknown_model_detail(model_id, list(self.registry)))
        return spec

    def add_folder(self, spec: ModelSpec) -> None:
        """Register a local checkpoint at runtime (a model trained in the lab), openable like
        any other from now on. The registry is replaced, never changed in place, so a reader
        iterating the old one is not disturbed."""
        if spec.source is not Source.FOLDER or spec.folder is None:
            raise ValueError(f"add_folder takes a folder's spec; got {spec.source} {spec.folder}")
        with self._guard:
            self._states.setdefault(spec.id, LoadState())
            self._locks.setdefault(spec.id, threading.Lock())
            self.load_count.setdefault(spec.id, 0)
            self.registry = {**self.registry, spec.id: spec}

    def remove_folder(self, model_id: str) -> bool:
        """Forget a model add_folder registered, unless it is loaded (then it stays, and its
        folder's removal makes its next load fail with a clear reason). True if forgotten."""
        with self._guard:
            spec = self.registry.get(model_id)
            if spec is None or spec.source is not Source.FOLDER or model_id in self._loaded:
                return False
            self.registry = {k: v for k, v in self.registry.items() if k != model_id}
            return True

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
        """The loaded model, loading it first if needed (concurrent callers load once); a
        load that failed before, with files unchanged since, fails again at once."""
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
            unloaded = []
            with self._guard:
                self._loaded[model_id] = loaded
                while len(self._loaded) > self.max_loaded:
                    unloaded.append(self._unload_oldest())
            self._unloaded_now(unloaded)
            return loaded

    def _load(self, model_id: str) -> LoadedModel:
        """Size, make room, load; a failure is remembered with the files as they are after it,
        and frees what the load took before its reason is raised."""
        spec = self.spec(model_id)
        failed = self._failures.get(model_id)
        if failed is not None and failed[0] == files_fingerprint(spec, self.cache_dir):
            self._states[model_id] = LoadState(state="failed", error=failed[1])
            raise ModelUnavailable(failed[1])
        state = LoadState(state="loading", stage="sizing", fraction=0.0)
        self._states[model_id] = state

        def progress(stage: str, fraction: float) -> None:
            state.stage, state.fraction = stage, fraction

        start = time.perf_counter()
        reason, loaded = None, None
        try:
            loaded = self._sized_load(spec, progress)
        except ModelUnavailable as err:
            reason = err.message
        except ServerBusy:
            self._states[model_id] = LoadState()
            raise
        if loaded is not None:
            self._failures.pop(model_id, None)
            self.load_count[model_id] += 1
            self._states[model_id] = LoadState(
                state="ready", stage="ready", fraction=1.0, seconds=time.perf_counter() - start
            )
            return loaded
        # The failed load's exception, and the frames that held what it built, are gone here.
        gc.collect()
        give_back_freed_heap()
        files = files_fingerprint(spec, self.cache_dir)
        if files is not None:
            self._failures[model_id] = (files, reason)
        self._states[model_id] = LoadState(state="failed", error=reason)
        raise ModelUnavailable(reason)

    def _sized_load(self, spec: ModelSpec, progress) -> LoadedModel:
        """load_model once room is made for what its load takes. A GGUF copy that looked
        converted but fails its check is removed by the load (ConversionNeeded), which is then
        sized again, with its conversion, and run once more."""
        for attempt in range(2):
            size = model_size(
                spec, self.cache_dir, self.placement, self.hub_downloads, self.model_bytes
            )
            self._make_room(spec.id, size)
            loaded = None
            try:
                loaded = load_model(
                    spec,
                    cache_dir=self.cache_dir,
                    token_limit=self.token_limit,
                    progress=progress,
                    hub_downloads=self.hub_downloads,
                    placement=self.placement,
                    may_convert=bool(size.conversion_bytes) or attempt > 0,
                )
                return loaded
            except ConversionNeeded:
                if attempt > 0:
                    raise
            finally:
                with self._guard:
                    self._held.pop(spec.id, None)
                    if loaded is not None:
                        refs = _tensor_refs(loaded)
                        self._held[spec.id] = _Held(spec.id, size.resident, refs)
        raise AssertionError("unreachable")

    def held_bytes(self) -> int:
        """Bytes the models hold now: those loaded, those being loaded (at what their load
        takes) and those unloaded that something still holds."""
        with self._guard:
            return self._held_bytes()

    def _held_bytes(self) -> int:
        self._unloaded = [held for held in self._unloaded if held.alive()]
        return sum(h.nbytes for h in self._held.values()) + sum(h.nbytes for h in self._unloaded)

    def _make_room(self, model_id: str, size: ModelSize) -> None:
        """Count `size.loading` for this load, unloading the least recently used models until
        it fits in model_bytes; ModelUnavailable where it could never fit, ServerBusy where
        models still in use hold the room for longer than UNLOAD_WAIT_SECONDS."""
        if self.model_bytes is None:
            with self._guard:
                self._held[model_id] = _Held(model_id, size.loading)
            return
        if size.loading > self.model_bytes:
            raise ModelUnavailable(self._too_large(model_id, size))
        deadline = time.monotonic() + UNLOAD_WAIT_SECONDS
        while True:
            unloaded = []
            with self._guard:
                while self._loaded and self._held_bytes() + size.loading > self.model_bytes:
                    unloaded.append(self._unload_oldest())
                fits = self._held_bytes() + size.loading <= self.model_bytes
                if fits:
                    self._held[model_id] = _Held(model_id, size.loading)
                in_use = sorted({h.model_id for h in [*self._unloaded, *self._held.values()]})
            self._unloaded_now(unloaded)
            if fits:
                return
            if unloaded:  # their passes are forgotten now: count again at once
                continue
            if time.monotonic() > deadline:
                raise ServerBusy(
                    f"'{model_id}' needs {size.loading / MiB:,.0f} MiB ({size.describe()}), and "
                    f"models loaded or still in use ({', '.join(in_use)}) hold the rest of the "
                    f"{self.model_bytes / MiB:,.0f} MiB that models may hold (ATLAS_MODEL_BYTES)",
                    retry_after=int(UNLOAD_WAIT_SECONDS),
                )
            time.sleep(0.1)

    def _too_large(self, model_id: str, size: ModelSize) -> str:
        fix = "raise ATLAS_MODEL_BYTES, and the memory limit with it (docs/deployment.md#memory)"
        checkpoint = GGUF_SOURCES.get(self.spec(model_id).source)
        if checkpoint is not None and size.conversion_bytes > size.resident:
            fix = (
                "convert it once before starting the server (`python -m "
                f"atlas_engine.models.sources convert {checkpoint.slug} <ATLAS_CACHE_DIR>`; "
                f"`make gemma` does it for Gemma), or {fix}"
            )
        return (
            f"'{model_id}' needs {size.loading / MiB:,.0f} MiB ({size.describe()}), more than "
            f"the {self.model_bytes / MiB:,.0f} MiB that models may hold (ATLAS_MODEL_BYTES): "
            f"{fix}"
        )

    def _unload_oldest(self) -> str:
        """Unload the least recently used model (the guard held); its bytes stay counted
        while anything holds one of its tensors."""
        model_id, _ = self._loaded.popitem(last=False)
        self._states[model_id] = LoadState()
        held = self._held.pop(model_id, None)
        if held is not None:
            self._unloaded.append(held)
        return model_id

    def _unloaded_now(self, model_ids: list[str]) -> None:
        """What follows an unload, outside the guard: the callbacks, then a collection."""
        for model_id in model_ids:
            for callback in self._on_unload:
                callback(model_id)
        if model_ids:
            gc.collect()

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
