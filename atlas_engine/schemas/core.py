"""Request and response bodies of POST /api/core/attention."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from atlas_engine.errors import input_rule
from atlas_engine.schemas.common import (
    FiniteFloat,
    PositiveScale,
    Seed,
    StrictModel,
    index_list,
    json_int,
)
from attention_core.masks import MASK_KINDS, NEEDS_WINDOW, SQUARE_ONLY

MAX_CORE_TOKENS = 64
MAX_CORE_DIMS = 256

Row = Annotated[list[FiniteFloat], Field(min_length=1, max_length=MAX_CORE_DIMS)]
Matrix = Annotated[list[Row], Field(min_length=1, max_length=MAX_CORE_TOKENS)]
MaskKind = Literal[MASK_KINDS]

SEED_EXAMPLE = {
    "q": [[1.0, 0.5], [0.3, 1.2], [0.8, 0.6]],
    "k": [[1.0, 0.5], [0.4, 1.0], [0.9, 0.3]],
    "v": [[0.1, 0.2], [0.5, 0.8], [0.3, 0.1]],
    "mask": "none",
    "scale": True,
    "temperature": 1.0,
}


def check_matrix(name: str, m: Matrix) -> tuple[int, int]:
    """Rows x cols of a rectangular matrix. Emptiness and the size bounds are the fields' own
    constraints (min_length/max_length), checked before this runs."""
    rows, cols = len(m), len(m[0])
    ragged = [i for i, row in enumerate(m) if len(row) != cols]
    if ragged:
        raise input_rule(
            f"{name} is ragged: row 0 has {cols} numbers but row {ragged[0]} has {len(m[ragged[0]])}"
        )
    return rows, cols


def check_qkv_matrices(q: Matrix, k: Matrix, v: Matrix) -> tuple[int, int]:
    """(q_len, k_len) of a rectangular q, k, v that fit together: q and k share d_k, and k and
    v have one row per key. An input_rule error says which rule is broken."""
    q_len, d_k = check_matrix("q", q)
    k_len, d_k2 = check_matrix("k", k)
    v_len, _ = check_matrix("v", v)
    if d_k != d_k2:
        raise input_rule(f"q has {d_k} columns but k has {d_k2}: queries and keys share d_k")
    if k_len != v_len:
        raise input_rule(f"k has {k_len} rows but v has {v_len}: each key needs one value")
    return q_len, k_len


class CoreAttentionRequest(StrictModel):
    """Matrices for one attention head, plus how to mask and scale it.

    q is (q_len, d_k), k is (k_len, d_k), v is (k_len, d_v); at most 64 tokens and 256 dims.
    """

    model_config = ConfigDict(json_schema_extra={"examples": [SEED_EXAMPLE]})

    q: Matrix = Field(description="Queries, (q_len, d_k).")
    k: Matrix = Field(description="Keys, (k_len, d_k).")
    v: Matrix = Field(description="Values, (k_len, d_v).")
    mask: MaskKind = "none"
    window: json_int(ge=0, le=MAX_CORE_TOKENS) | None = Field(
        None,
        description="sliding_window/dilated/bigbird: reach each side; sliding_window_causal: "
        "reach back.",
    )
    dilation: json_int(ge=1, le=MAX_CORE_TOKENS) = Field(
        2, description="dilated: gap between keys."
    )
    global_tokens: index_list(MAX_CORE_TOKENS, "global/bigbird: global positions") = Field(
        default_factory=lambda: [0]
    )
    num_random: json_int(ge=0, le=MAX_CORE_TOKENS) = Field(
        2, description="random/bigbird: keys a row."
    )
    seed: Seed = Field(0, description="random/bigbird: reproducible draw.")
    block_size: json_int(ge=1, le=MAX_CORE_TOKENS) = Field(2, description="block_sparse.")
    custom_mask: (
        list[Annotated[list[bool], Field(min_length=1, max_length=MAX_CORE_TOKENS)]] | None
    ) = Field(
        None,
        min_length=1,
        max_length=MAX_CORE_TOKENS,
        description="custom: (q_len, k_len), true = may attend.",
    )
    scale: bool | PositiveScale = Field(
        True, description="true: 1/sqrt(d_k); false: unscaled; a number in (0, 1e6]: that factor."
    )
    temperature: FiniteFloat = Field(
        1.0, ge=1e-6, le=1e6, description="Softmax temperature, in [1e-6, 1e6]."
    )

    @model_validator(mode="after")
    def _shapes_fit(self) -> CoreAttentionRequest:
        q_len, k_len = check_qkv_matrices(self.q, self.k, self.v)
        if self.mask in NEEDS_WINDOW and self.window is None:
            raise input_rule(f"mask '{self.mask}' needs a 'window' (an integer >= 0)")
        if self.mask == "custom":
            if self.custom_mask is None:
                raise input_rule(
                    "mask 'custom' needs 'custom_mask', a (q_len, k_len) boolean matrix"
                )
            shape = (len(self.custom_mask), len(self.custom_mask[0]) if self.custom_mask else 0)
            if shape != (q_len, k_len) or any(len(r) != k_len for r in self.custom_mask):
                raise input_rule(f"custom_mask must be ({q_len}, {k_len}) to fit q and k")
        if self.mask in SQUARE_ONLY and q_len != k_len:
            raise input_rule(f"mask '{self.mask}' needs q and k of the same length")
        return self


Cell = float | None


class CoreAttentionResponse(BaseModel):
    """Every stage, as (q_len, k_len) matrices except output (q_len, d_v).

    In masked_scores a forbidden cell is null (it stands for -infinity, which JSON cannot hold).
    """

    scores: list[list[float]] = Field(description="q @ k^T")
    scaled_scores: list[list[float]] = Field(description="scores * scale / temperature")
    masked_scores: list[list[Cell]] = Field(description="scaled_scores, null where masked (-inf)")
    weights: list[list[float]] = Field(description="softmax rows; masked cells exactly 0")
    output: list[list[float]] = Field(description="weights @ v")
    mask: list[list[bool]] = Field(description="true = may attend")
    scale: float = Field(description="the factor q @ k^T was multiplied by")
    temperature: float
    computed_pairs: int
    full_pairs: int
