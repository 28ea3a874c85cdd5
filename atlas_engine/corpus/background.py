"""The corpus job beside the server: `make run` starts the server at once and describes every
head of the embedded models over the corpus behind it, so a new user's first page answers in
seconds and the head pages fill in while they look around.

One thread per server walks the models in order (the settings' corpus_models): it waits for
the corpus to exist (`make run` installs python3-doc beside the server), plans the run (or finds
the one in the store: a server stopped half way goes on where it was), and hands the texts to
the heavy lane a small batch at a time as the lowest-priority work there is
(atlas_engine.compute.run_when_idle): a batch is as many texts as a forward pass of about
BATCH_SECONDS holds by the model's own estimate (ForwardResult.seconds_for: MiniLM 16 texts of
128 tokens, SmolLM2 one), so a request never waits for more than one such unit, and short
requests run inside it between its layers. Each batch's results are stored in one transaction
as it finishes. The thread itself runs no PyTorch (a model is loaded on a thread that ends,
describe_batch on the heavy lane), so it starts no OpenMP team of its own.

What it is doing is `progress()`: GET /api/corpus reports it and the head pages show it; the
log has one line a step (at most every LOG_EVERY_SECONDS, and each model's start and end).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from atlas_engine import compute
from atlas_engine.corpus.job import BATCH_TEXTS, batches, describe_batch, plan
from atlas_engine.corpus.sampling import Sampler
from atlas_engine.corpus.store import Store, open_or_set_aside, reading
from atlas_engine.corpus.texts import CorpusMissing
from atlas_engine.errors import AtlasError, StoreUnavailable
from atlas_engine.inference.forward import ForwardResult
from atlas_engine.models.loader import LoadedModel
from atlas_engine.schemas.corpus import BackgroundState

log = logging.getLogger("attention_atlas")

CORPUS = "python-docs"
SEQUENCE_TOKENS = 128
LOG_EVERY_SECONDS = 15.0
CORPUS_POLL_SECONDS = 5.0
BACKGROUND_NICE = 19  # the thread's own work (planning, writing the store) goes after all else
BATCH_SECONDS = 0.5  # a batch's forward pass at most this, by ForwardResult.seconds_for


@dataclass(frozen=True)
class ModelProgress:
    """Where the background job stands on one model."""

    model: str
    state: BackgroundState
    done: int = 0  # texts finished (stored), this run and earlier ones
    planned: int = 0  # texts in the run (0 until it is planned)
    tokens_per_second: float | None = None  # over this server's texts so far
    seconds_left: float | None = None  # at that rate, for the texts not done
    detail: str = ""  # a sentence for a person: what it waits for, or why it failed


class BackgroundCorpus:
    """Describes `models` over the first `texts` texts of the corpus into the store at
    `store_path`, a small batch at a time on the heavy lane, on a thread of its own."""

    def __init__(
        self,
        get_model: Callable[[str], LoadedModel],
        store_path: Path,
        models: list[str],
        texts: int,
        corpus: str = CORPUS,
        tokens: int = SEQUENCE_TOKENS,
    ) -> None:
        self._get_model = get_model
        self._store_path = store_path
        self._texts = texts
        self._corpus = corpus
        self._tokens = tokens
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._progress = {m: ModelProgress(m, "queued") for m in models if texts > 0}
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self._progress:
            self._thread = threading.Thread(target=self._work, name="atlas-corpus", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop between two texts (what is stored stays: the next start resumes from it)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def progress(self) -> list[ModelProgress]:
        with self._lock:
            return list(self._progress.values())

    def _set(self, model: str, **fields: object) -> ModelProgress:
        with self._lock:
            self._progress[model] = replace(self._progress[model], **fields)
            return self._progress[model]

    def _work(self) -> None:
        compute.lower_priority(BACKGROUND_NICE)
        for model in list(self._progress):
            if self._stop.is_set() or compute.shutting_down():
                self._set(model, state="stopped", detail="the server stopped first")
                continue
            try:
                try:
                    self._describe(model)
                except StoreUnavailable:  # set aside: once more, into the new store
                    self._describe(model)
            except (compute.ShuttingDown, StopRequested):
                self._set(model, state="stopped", detail="stopped; the next start goes on")
            except (AtlasError, ValueError, OSError) as err:
                message = getattr(err, "message", None) or str(err)
                self._set(model, state="failed", detail=message)
                log.warning("corpus job: %s failed: %s", model, message)
            except Exception as err:  # a bug: logged with its traceback, the server goes on
                self._set(model, state="failed", detail=f"{type(err).__name__}: {err}")
                log.exception("corpus job: %s failed", model)

    def _wait_for_corpus(self, model: str, loaded: LoadedModel, store: Store):
        """The run, planned once the corpus can be read (it may still be installing)."""
        while True:
            self._check_stop()
            try:
                return plan(store, loaded, self._corpus, self._tokens, self._texts)
            except CorpusMissing as err:
                if self._progress[model].state != "waiting":
                    log.info("corpus job: waiting for the corpus (%s)", err)
                self._set(model, state="waiting", detail=str(err))
                self._stop.wait(CORPUS_POLL_SECONDS)

    def _describe(self, model: str) -> None:
        self._set(model, state="loading", detail="loading the model")
        loaded = _load_in_passing(self._get_model, model)
        store = open_or_set_aside(self._store_path)
        try:
            with reading(store):  # a store damaged meanwhile is set aside (StoreUnavailable)
                self._set(model, state="planning", detail="cutting the corpus into texts")
                run = self._wait_for_corpus(model, loaded, store)
                self._set(model, state="running", done=run.done, planned=run.planned, detail="")
                if run.done < run.planned:
                    log.info(
                        "corpus job: %s, %d of %d texts done; describing the rest beside requests",
                        model, run.done, run.planned,
                    )  # fmt: skip
                self._run(model, loaded, store, run.id, run.done, run.planned)
        finally:
            store.close()

    def _run(
        self, model: str, loaded: LoadedModel, store: Store, run: int, done: int, planned: int
    ) -> None:
        tokens, started, logged = 0, time.monotonic(), time.monotonic()
        pending = store.pending(run)
        sampler = Sampler(store, store.run(run))
        size = batch_size(loaded, self._tokens)
        warm = [item for item in pending if item[0] < sampler.settings.warmup_size]
        rest = [item for item in pending if item[0] >= sampler.settings.warmup_size]
        n = 0
        for part in (warm, rest):
            for batch in batches(loaded, part, size):
                self._check_stop()
                began = time.perf_counter()
                indices = [idx for idx, _ in batch]
                found = compute.run_when_idle(
                    describe_batch, loaded, [text for _, text in batch], sampler.settings,
                    lambda first, activation, at=indices: sampler.wanted(at, activation, first),
                    model=loaded.id,
                )  # fmt: skip
                seconds = (time.perf_counter() - began) / len(batch)
                sampler.record_many([(idx, one, one.keys, one.values, seconds)
                                     for (idx, _), one in zip(batch, found, strict=True)])  # fmt: skip
                n += len(batch)
                tokens += sum(one.tokens for one in found)
                rate = tokens / max(1e-9, time.monotonic() - started)
                left = (len(pending) - n) * (tokens / n) / rate
                now = self._set(model, done=done + n, tokens_per_second=rate, seconds_left=left)
                if time.monotonic() - logged >= LOG_EVERY_SECONDS and n < len(pending):
                    logged = time.monotonic()
                    log.info("corpus job: %s", describe(now))
        final = self._set(model, state="done", seconds_left=0.0, detail="")
        log.info("corpus job: %s", describe(final))

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise StopRequested
        if compute.shutting_down():
            raise compute.ShuttingDown("the server is shutting down")


def batch_size(loaded: LoadedModel, tokens: int) -> int:
    """Texts of up to `tokens` tokens a background batch holds: as many as a forward pass of
    BATCH_SECONDS runs by the model's estimate, 1 to BATCH_TEXTS."""
    one = ForwardResult.seconds_for(loaded.arch, tokens)
    return max(1, min(BATCH_TEXTS, int(BATCH_SECONDS / max(one, 1e-9))))


class StopRequested(Exception):
    """BackgroundCorpus.stop() was called."""


def describe(p: ModelProgress) -> str:
    """One line of the log: '<model> 40 of 200 texts, 355 tokens/s, about 1 min left'."""
    line = f"{p.model} {p.done} of {p.planned} texts"
    if p.tokens_per_second is not None:
        line += f", {p.tokens_per_second:,.0f} tokens/s"
    if p.state == "done":
        return line + ", done"
    if p.seconds_left is not None:
        line += f", about {duration(p.seconds_left)} left"
    return line


def duration(seconds: float) -> str:
    """'40 s', '3 min', '1 h 5 min': how long, to a person."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def _load_in_passing(get_model: Callable[[str], LoadedModel], model: str) -> LoadedModel:
    """get_model(model) on a thread that ends with it: loading runs PyTorch, and a thread that
    has run PyTorch keeps an OpenMP team for as long as it lives (atlas_engine.compute)."""
    found: list[LoadedModel] = []
    failed: list[BaseException] = []

    def load() -> None:
        compute.lower_priority(BACKGROUND_NICE)
        try:
            found.append(get_model(model))
        except BaseException as err:  # handed to the caller
            failed.append(err)

    thread = threading.Thread(target=load, name="atlas-corpus-load", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return found[0]
