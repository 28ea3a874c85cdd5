"""Schemas of POST /api/attention/compare: two heads side by side (any layers, two inputs, or
two models), with their difference where the tokens line up."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.schemas.attention import EXAMPLE_TEXT, MAX_TEXT_CHARS, TextRequest, check_text
from atlas_engine.schemas.common import NOT_BLANK, Index, StrictModel


class OtherSide(StrictModel):
    """Side B: what it leaves out is side A's."""

    model: str | None = Field(
        None,
        description="A model id from GET /api/models; null: side A's model.",
        min_length=1,
        max_length=300,
    )
    text: str | None = Field(
        None,
        description="null: side A's text (and text pair).",
        max_length=MAX_TEXT_CHARS,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    text_pair: str | None = Field(
        None,
        description="Segment B for BERT-family models, with `text` only (else side A's pair).",
        max_length=MAX_TEXT_CHARS,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    layer: Index
    head: Index

    @field_validator("text", "text_pair")
    @classmethod
    def _text_ok(cls, v: str | None, info) -> str | None:
        return check_text(v, f"other.{info.field_name}")


class CompareRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "text": EXAMPLE_TEXT,
                    "layer": 3,
                    "head": 0,
                    "other": {"layer": 20, "head": 5},
                },
                {
                    "model": "sentence-transformers/all-MiniLM-L6-v2",
                    "text": "The cat sat on the mat.",
                    "layer": 2,
                    "head": 3,
                    "other": {"text": "The dog sat on the mat.", "layer": 2, "head": 3},
                },
            ]
        }
    )

    layer: Index = Field(description="Side A's layer.")
    head: Index = Field(description="Side A's head.")
    other: OtherSide = Field(description="Side B; its model and text default to side A's.")


class SideMap(BaseModel):
    model: str
    text: str
    tokens: list[str]
    layer: int
    head: int
    weights: list[list[float]] = Field(description="(seq, seq), the model's own output")


class CompareResponse(BaseModel):
    a: SideMap
    b: SideMap
    aligned: bool = Field(
        description="true when both sides have as many tokens (and, for two models, the same "
        "tokens), so position i means the same place on both sides"
    )
    alignment: str = Field(description="A sentence saying how the tokens line up, or why not")
    differing_tokens: list[int] = Field(
        description="Aligned: the positions whose tokens differ (two inputs); else []"
    )
    difference: list[list[float]] | None = Field(
        description="Aligned: b.weights - a.weights, (seq, seq); else null"
    )
    row_distance: list[float] | None = Field(
        description="Aligned: each query row's total variation distance (0 same, 1 disjoint)"
    )
    mean_row_distance: float | None
    max_abs_difference: float | None
