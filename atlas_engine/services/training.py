"""POST /api/lab/train: a small attention-only transformer trained live (attention_core.training),
streamed as NDJSON lines, then saved as a GPT-2 checkpoint the explorer opens.

Where it runs: a lane of its own, MAX_TRAINING_JOBS threads, each with one intra-op thread (two
contended threads made a step 10-25x slower on the 2-core VM) at the heavy lane's lowered
priority (ATLAS_HEAVY_LANE_NICE), so the quick lane's threads, which answer the explorer's
sentences, and the event loop go first. A run past MAX_TRAINING_JOBS is refused at once (503,
Retry-After), never queued. A closed connection stops the run at its next snapshot."""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel

from atlas_engine import compute
from atlas_engine.errors import InvalidInput, ServerBusy
from atlas_engine.inference.trained import save_checkpoint, token_names
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.registry import ModelSpec, Source
from atlas_engine.schemas.training import (
    MAX_STREAM_BYTES,
    MAX_TRAIN_SECONDS,
    TrainEnded,
    TrainRequest,
    TrainSnapshot,
    TrainStarted,
)
from atlas_engine.serialize import to_lists
from attention_core.training import (
    Snapshot,
    TrainConfig,
    probe_batches,
    train,
    training_cost,
)

log = logging.getLogger("attention_atlas")

MAX_TRAINING_JOBS = 1
"""Runs at once; one more is refused with 503 (each holds one core for up to two minutes)."""
KEEP_TRAINED = 8
"""Saved checkpoints kept in the trained folder: the newest; older ones are deleted."""
RETRY_AFTER_SECONDS = 30
MODEL_PREFIX = "trained/"

_slots = threading.BoundedSemaphore(MAX_TRAINING_JOBS)


def _start_training_thread(nice: int) -> None:
    compute.lower_priority(nice)
    compute._start_quick_thread()  # one intra-op thread on this thread only


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _lane(nice: int) -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                MAX_TRAINING_JOBS, "atlas-train", initializer=_start_training_thread,
                initargs=(nice,),
            )  # fmt: skip
        return _executor


def checked(
    req: TrainRequest, max_seconds: float = MAX_TRAIN_SECONDS
) -> tuple[TrainConfig, TrainStarted]:
    """The run's config and its cost, after refusing what the schema cannot state (422); a run
    estimated over max_seconds (the server's ATLAS_MAX_TRAIN_SECONDS) is refused too."""
    fields = req.model_dump(exclude={"every"})
    try:
        config = TrainConfig(**fields)
    except ValueError as err:
        raise InvalidInput(str(err)) from None
    cost = training_cost(config, req.every)
    snapshots = config.steps // req.every + 2
    if snapshots * cost.snapshot_bytes > MAX_STREAM_BYTES:
        least = -(-config.steps // max(1, MAX_STREAM_BYTES // cost.snapshot_bytes - 2))
        raise InvalidInput(
            f"{snapshots} snapshots of {cost.snapshot_bytes} bytes exceed {MAX_STREAM_BYTES} "
            f"bytes; raise `every` to at least {least} or lower `steps`"
        )
    if cost.seconds > max_seconds:
        raise InvalidInput(
            f"this run is estimated at {cost.seconds:.0f} s here, over the {max_seconds:g} "
            "s a run may take; lower `steps`, `batch`, `half`, `d_model` or `layers`"
        )
    words = token_names(config.vocab)
    probe = [words[i] for i in probe_batches(config)[0][0].tolist()]  # the maps' sequence
    started = TrainStarted(
        event="started", config=asdict(config), every=req.every, parameters=cost.parameters,
        bytes=cost.bytes, seconds=cost.seconds, snapshot_bytes=cost.snapshot_bytes, probe=probe,
    )  # fmt: skip
    return config, started


def snapshot_line(s: Snapshot) -> TrainSnapshot:
    return TrainSnapshot(
        event="snapshot", step=s.step, elapsed=s.elapsed, loss=s.loss, loss_first=s.loss_first,
        loss_second=s.loss_second, previous_token=to_lists(s.previous_token),
        induction=to_lists(s.induction), task_score=to_lists(s.task_score),
        maps=to_lists(s.maps), phase_changed=s.phase_changed,
    )  # fmt: skip


def keep_newest(root: Path, manager: ModelManager, keep: int = KEEP_TRAINED) -> list[str]:
    """Delete all but the `keep` newest checkpoint folders under root; forget their models."""
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True
    )
    removed = []
    for old in folders[keep:]:
        manager.remove_folder(MODEL_PREFIX + old.name)
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old.name)
    return removed


def register_saved(root: Path, manager: ModelManager) -> None:
    """Every checkpoint already under root openable in the explorer (at the server's start)."""
    if root.is_dir():
        for folder in root.iterdir():
            if (folder / "config.json").is_file():
                manager.add_folder(_spec(folder))


def _spec(folder: Path) -> ModelSpec:
    return ModelSpec(
        MODEL_PREFIX + folder.name, Source.FOLDER,
        "A model trained in the lab (attention-only GPT-2, word-level tokens).", None, folder,
    )  # fmt: skip


def _run(
    config: TrainConfig, every: int, root: Path, manager: ModelManager,
    gone: Callable[[], bool], emit: Callable[[BaseModel], None],
) -> TrainEnded:  # fmt: skip
    def on_snapshot(s: Snapshot) -> bool:
        if gone() or compute.shutting_down():
            return False
        emit(snapshot_line(s))
        return True

    run = train(config, every, on_snapshot)
    if run.stopped:
        reason = "stopped" if compute.shutting_down() and not gone() else "client_gone"
        return TrainEnded(event="end", reason=reason, steps_done=run.steps_done)
    short = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
    folder = save_checkpoint(run.model, root / short)
    manager.add_folder(_spec(folder))
    keep_newest(root, manager)
    return TrainEnded(
        event="end", reason="done", steps_done=run.steps_done, model=MODEL_PREFIX + short
    )


def start_training(
    req: TrainRequest, root: Path, manager: ModelManager, nice: int,
    max_seconds: float = MAX_TRAIN_SECONDS,
) -> tuple[AsyncIterator[bytes], Callable[[], None]]:  # fmt: skip
    """Check, size and admit the run (422, 503 before any work), start it on the training lane,
    and return (the NDJSON lines, stop): stop() makes the run end at its next snapshot."""
    config, started = checked(req, max_seconds)
    if not _slots.acquire(blocking=False):
        raise ServerBusy(
            f"{MAX_TRAINING_JOBS} training run(s) already going; retry in a while",
            RETRY_AFTER_SECONDS,
        )
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[BaseModel | None] = asyncio.Queue()
    gone = threading.Event()
    lines.put_nowait(started)

    def emit(line: BaseModel | None) -> None:
        try:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        except RuntimeError:  # the loop has closed (the server stopped): nobody reads
            gone.set()

    def job() -> None:
        try:
            end = _run(config, req.every, root, manager, gone.is_set, emit)
        except Exception as err:  # the stream has started: say so in it rather than hang
            log.exception("a training run failed")
            end = TrainEnded(event="end", reason="error", steps_done=0, detail=str(err)[:300])
        finally:
            _slots.release()
        emit(end)
        emit(None)

    try:
        _lane(nice).submit(job)
    except BaseException:
        _slots.release()
        raise

    async def read() -> AsyncIterator[bytes]:
        while (line := await lines.get()) is not None:
            yield (line.model_dump_json() + "\n").encode("utf-8")

    return read(), gone.set
