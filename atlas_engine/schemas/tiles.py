"""Schemas of POST /api/attention/tiles: a window of one layer's maps at a zoom level."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import (
    EXAMPLE_TEXT,
    MAX_CELL,
    BlockReduce,
    HeadList,
    TextRequest,
)
from atlas_engine.schemas.common import Index, json_int

MAX_TILE_CELLS = 1_048_576
"""Cells one answer may hold, over all its heads (1024 x 1024 for one head)."""


class TilesRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "text": EXAMPLE_TEXT,
                    "layer": 3,
                    "heads": [0, 4],
                    "cell": 2,
                    "reduce": "max",
                },
                {
                    "model": "sentence-transformers/all-MiniLM-L6-v2",
                    "text": EXAMPLE_TEXT,
                    "layer": 0,
                    "heads": [1],
                    "rows": [2, 8],
                    "cols": [0, 6],
                },
            ]
        }
    )

    layer: Index
    heads: HeadList | None = Field(None, description="Heads to answer (all by default).")
    rows: list[Index] | None = Field(
        None, min_length=2, max_length=2,
        description="[start, stop) of the query rows, start < stop <= the tokens (all by "
        "default).",
    )  # fmt: skip
    cols: list[Index] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="[start, stop) of the keys, start < stop <= the tokens (all by default).",
    )
    cell: json_int(ge=1, le=MAX_CELL) = Field(
        1, description="Each answered value covers cell x cell weights (1: the weights themselves)."
    )
    reduce: BlockReduce = Field(
        "max", description="How a cell x cell block becomes one value (ignored when cell is 1)."
    )


class TilesResponse(BaseModel):
    model: str
    layer: int
    heads: list[int]
    seq_len: int
    rows: list[int] = Field(description="[start, stop) answered")
    cols: list[int] = Field(description="[start, stop) answered")
    cell: int
    reduce: BlockReduce
    row_tokens: list[str] = Field(description="cell 1: each row's token; else each block's first")
    col_tokens: list[str]
    values: list[list[list[float]]] = Field(
        description="[head][row block][col block]: weights (cell 1) or each block's max or mean"
    )
    error_bound: float = Field(
        description="|value - transformers' own eager weight (output_attentions=True)| at most "
        "this: the replay's bound (1e-5 in float32), or 1e-3 for a text long enough that its "
        "pass ran PyTorch's fused attention, whose rounding the later layers carry on "
        "(docs/faithful-numbers.md)"
    )
