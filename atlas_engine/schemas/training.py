"""Schemas of POST /api/lab/train: train a small attention-only transformer, streamed as NDJSON
(attention_core.training). Each bound is TrainConfig's own (validate), stated here for the schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.common import Seed, StrictModel, json_int
from attention_core import training as tr

MAX_STREAM_BYTES = 16 * 2**20
"""Snapshots x Snapshot.nbytes of one run: (steps // every + 2) snapshots of
(layers, heads, 2 half, 2 half) maps at most this many bytes (a refused run: 422)."""
MAX_TRAIN_SECONDS = 60.0
"""A run estimated (training_cost) to take longer than this is refused (422)."""


class TrainRequest(StrictModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={"examples": [{"task": "induction", "layers": 2, "steps": 300}]},
    )

    task: Literal[tr.TASKS] = Field("induction", description="induction or reverse")  # type: ignore[valid-type]
    layers: json_int(ge=1, le=tr.MAX_LAYERS) = Field(
        2, description="One layer forms no induction head"
    )
    heads: json_int(ge=1, le=tr.MAX_HEADS) = Field(4, description="Must divide d_model")
    d_model: json_int(ge=8, le=tr.MAX_D_MODEL) = Field(64)
    vocab: json_int(ge=4, le=tr.MAX_VOCAB) = Field(32)
    half: json_int(ge=2, le=tr.MAX_HALF) = Field(12, description="Tokens in each copy")
    positions: bool = Field(True, description="A learned position embedding")
    lr: float = Field(3e-3, gt=0, le=0.1, allow_inf_nan=False, description="Adam's rate")
    steps: json_int(ge=1, le=tr.MAX_STEPS) = Field(1500)
    batch: json_int(ge=1, le=tr.MAX_BATCH) = Field(32)
    seed: Seed = Field(0, description="The same seed gives the same curve on the same machine")
    every: json_int(ge=1, le=tr.MAX_STEPS) = Field(
        25,
        description="A snapshot line every this many steps (and at step 0 and the last); "
        f"(steps // every + 2) snapshots of the maps must fit {MAX_STREAM_BYTES} bytes",
    )


class TrainStarted(BaseModel):
    """The first line: the run's config and its cost, estimated before any work."""

    event: Literal["started"]
    config: dict = Field(description="TrainConfig's fields, as run")
    every: int
    parameters: int
    bytes: int = Field(description="Estimated peak memory")
    seconds: float = Field(description="Estimated time on this machine")
    snapshot_bytes: int
    probe: list[str] = Field(
        description="The probe sequence the maps show, as the trained tokenizer's words (2 x half)"
    )


class TrainSnapshot(BaseModel):
    """One line per snapshot. Scores are (layers, heads); maps (layers, heads, T, T) on the
    first probe sequence; losses in nats on the fixed probe batch."""

    event: Literal["snapshot"]
    step: int
    elapsed: float
    loss: float
    loss_first: float
    loss_second: float
    previous_token: list[list[float]]
    induction: list[list[float]]
    task_score: list[list[float]]
    maps: list[list[list[list[float]]]]
    phase_changed: bool


class TrainEnded(BaseModel):
    """The last line: why the run ended; when done, the model id of the saved checkpoint."""

    event: Literal["end"]
    reason: Literal["done", "client_gone", "stopped", "error"] = Field(
        description="done: every step; client_gone: the connection closed; stopped: the server "
        "is shutting down; error: it failed (detail)"
    )
    steps_done: int
    model: str | None = Field(None, description="The saved checkpoint's model id (done only)")
    detail: str | None = None
