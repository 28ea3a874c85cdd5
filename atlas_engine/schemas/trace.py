"""Schemas of POST /api/attention/trace: one attention score taken apart into the residual
stream's pieces that made it (atlas_engine.inference.score_trace)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import TextRequest
from atlas_engine.schemas.common import Index, json_int

MAX_TRACE_TOKENS = 256
"""Tokens of a traced text: the pass up to the layer keeps each block's input and output and
its heads' outputs (~5 × layers × tokens × d_model numbers, 88 MB for SmolLM2 at 256)."""
MAX_TRACE_TOP = 24
"""Pieces a side the pair matrix shows at most (it is (3 · top + 2)² numbers at most)."""
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ANIMAL = "The animal didn't cross the street because it was too tired."


class TraceRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": MINILM, "text": ANIMAL, "layer": 3, "head": 1, "query": 10, "key": 2}
            ]
        }
    )

    layer: Index = Field(description="The layer of the head whose score is traced.")
    head: Index = Field(description="The query head (under GQA its group's key head is used).")
    query: Index = Field(description="The query position i.")
    key: Index = Field(description="The key position j; the query must be allowed to read it.")
    contrast: Index | None = Field(
        None,
        description="A second key j' the query reads: score(i, j) - score(i, j') is taken apart "
        "too. By default the key with the highest weight other than j.",
    )
    top: json_int(ge=1, le=MAX_TRACE_TOP) = Field(
        12,
        description="Pieces a side (query, key, and the contrast's two) whose pairs the matrix "
        "shows; every other piece is one row and column of its own.",
    )


class TracePiece(BaseModel):
    kind: Literal["embedding", "head", "mlp", "bias"]
    label: str = Field(description="'token embedding', 'L2 H5', 'L3 MLP', 'bias terms'...")
    layer: int | None = Field(description="The layer that wrote it (heads and MLPs).")
    head: int | None


class TracePair(BaseModel):
    query_piece: int = Field(description="Index into `pieces` (-1: every other piece).")
    key_piece: int = Field(description="Index into `pieces` (-1: every other piece).")
    value: float
    text: str = Field(description="The pair in words.")


class TraceSides(BaseModel):
    score: float = Field(description="What is taken apart: a score, or a difference of two.")
    position_bias: float = Field(
        description="The part of `score` no piece makes: the model's position bias (T5), or "
        "its difference between the two keys; 0 where none"
    )
    query_side: list[float] = Field(
        description="[piece]: its part through the query (its share of q_i against the whole "
        "key); sums to `score` less `position_bias`"
    )
    key_side: list[float] = Field(description="[piece]: its part through the key, likewise.")
    matrix: list[list[float]] = Field(
        description="[query row][key column] over `shown`, then every other piece, then the bias "
        "terms; sums to `score` less `position_bias`"
    )
    pairs: list[TracePair] = Field(description="The largest pairs, largest first.")


class TraceResponse(BaseModel):
    model: str
    tokens: list[str]
    layer: int
    head: int
    key_head: int = Field(description="The key/value head the query head reads (GQA: shared).")
    query: int
    key: int
    contrast: int | None = Field(description="The contrast key (null: the query reads one key).")
    weight: float = Field(description="The head's attention weight from the query to the key.")
    weights: list[float] = Field(description="[key]: the head's attention row at the query.")
    score: float = Field(
        description="The real pre-softmax score the model computed (scale · q·k, plus any "
        "position bias), before any softcap"
    )
    capped: float | None = Field(description="After the model's softcap (Gemma 2), else null.")
    position_bias: float = Field(description="A bias the model adds (T5's); 0 where none.")
    parts_sum: float = Field(description="The matrix's sum plus the position bias.")
    bound: float = Field(
        description="|parts_sum - score| is at most this: a fixed fraction of the sum of the "
        "pairs' sizes (float32 rounding)"
    )
    pieces: list[TracePiece] = Field(description="Every piece of the stream, the bias terms last.")
    shown: list[int] = Field(description="Indices into `pieces` of the matrix's first rows.")
    trace: TraceSides
    versus: TraceSides | None = Field(
        description="score(key) - score(contrast) taken apart the same way (null: no contrast)"
    )
    summary: list[str] = Field(description="What the trace shows, in sentences.")
    convention: str = Field(description="What is frozen, and how exceptions are treated.")
    stream_max_abs_diff: float = Field(
        description="|Σ pieces - the attention's real input| at the traced positions"
    )
