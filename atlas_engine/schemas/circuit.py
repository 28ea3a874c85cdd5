"""Schemas of POST /api/attention/circuit: which heads work together, as edges between heads
read off this text (how much of a later head's queries, keys and values an earlier head wrote)
or off a clean/corrupted pair (edge attribution patching)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_engine.schemas.attention import MAX_TEXT_CHARS, NOT_BLANK, TextRequest, check_text
from atlas_engine.schemas.common import Index, json_int
from atlas_engine.schemas.trace import ANIMAL, MINILM
from atlas_engine.schemas.writes import (
    IOI_CLEAN,
    IOI_CORRUPTED,
    MAX_PATCH_TOKENS,
    SMOL,
    HeadSource,
    TokenChoice,
)

MAX_CIRCUIT_TOKENS = MAX_PATCH_TOKENS
"""Tokens of a circuit's text: every head's writes at every position are kept while the
later layers are read (~layers × heads × tokens × d_model float64, 80 MB for SmolLM2 at 64)."""
MAX_CIRCUIT_EDGES = 1000

Input = Literal["q", "k", "v"]


class CircuitRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"model": MINILM, "text": ANIMAL, "by": "text", "focus": {"layer": 3, "head": 1}},
                {
                    "model": SMOL,
                    "text": IOI_CLEAN,
                    "by": "edges",
                    "corrupted": IOI_CORRUPTED,
                    "target": {"text": " Mary"},
                    "contrast": {"text": " John"},
                },
            ]
        }
    )

    by: Literal["text", "weights", "edges"] = Field(
        "text",
        description="text: an edge is the share of a later head's attention-weighted scores "
        "(through its queries or its keys) or of its output (through its values) that an "
        "earlier head wrote, on this text; weights: the Q-, K- and V-composition scores of "
        "Elhage et al. (2021) from the weights alone, less the score of random heads of the "
        "same shapes (computed once per model); edges: edge attribution patching between "
        "`text` (clean) and `corrupted`, the share of the metric's clean - corrupted "
        "difference each edge carries (first order).",
    )
    inputs: list[Input] = Field(
        ["q", "k", "v"],
        min_length=1,
        max_length=3,
        description="Which inputs of the later heads the edges enter.",
        json_schema_extra={"uniqueItems": True},
    )
    top: json_int(ge=1, le=MAX_CIRCUIT_EDGES) = Field(
        150, description="The strongest edges answered, by absolute value."
    )
    focus: HeadSource | None = Field(
        None,
        description="by=text: one later head whose inputs are also answered in full (every "
        "earlier head, MLP and embedding, and the bias terms).",
    )
    corrupted: str | None = Field(
        None,
        description=f"by=edges: the corrupted text, as many tokens as `text` (at most "
        f"{MAX_CIRCUIT_TOKENS}).",
        max_length=MAX_TEXT_CHARS,
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK},
    )
    position: Index | None = Field(
        None, description="by=edges: where the metric is read; the last position by default."
    )
    target: TokenChoice | None = Field(
        None, description="by=edges: metric = logit(target) - logit(contrast); by default the "
        "clean text's top guess",
    )  # fmt: skip
    contrast: TokenChoice | None = Field(
        None, description="by=edges: by default the corrupted text's top guess."
    )

    @field_validator("corrupted")
    @classmethod
    def _corrupted_ok(cls, v: str | None) -> str | None:
        return check_text(v, "corrupted")

    @field_validator("inputs")
    @classmethod
    def _distinct(cls, inputs: list[str]) -> list[str]:
        if len(set(inputs)) != len(inputs):
            raise ValueError("inputs must be distinct")
        return inputs


class CircuitEdge(BaseModel):
    from_layer: int
    from_head: int
    to_layer: int
    to_head: int = Field(
        description="The later head: by=text its query head (its own attention weighs the "
        "shared key and value); by=edges, for k and v under GQA, the key/value head"
    )
    input: Input
    value: float


class FocusInputs(BaseModel):
    layer: int
    head: int
    totals: list[float] = Field(
        description="[q, k, v]: the sums taken apart: the mean attention-weighted score (q and "
        "k take apart the same number) and 1 for the output"
    )
    heads: list[list[list[float]]] = Field(description="[input][layer][head]: each head's share.")
    mlps: list[list[float]] = Field(description="[input][layer]: each MLP's share.")
    embeddings: list[list[float]] = Field(description="[input][embedding]: each embedding's.")
    embedding_labels: list[str]
    bias: list[float] = Field(description="[input]: what no piece wrote.")


class CircuitResponse(BaseModel):
    model: str
    tokens: list[str]
    by: Literal["text", "weights", "edges"]
    layers: int
    heads: int
    kv_heads: int
    edges: list[CircuitEdge] = Field(description="The strongest edges, strongest first.")
    edge_count: int = Field(description="How many edges there are in all (before `top`).")
    largest: float = Field(description="The largest absolute value of any edge.")
    node_totals: list[list[list[float]]] = Field(
        description="[input][layer][head]: by=text, each head's total (the sum taken apart); "
        "by=weights and by=edges, the sum of the edges into each later head's input"
    )
    focus: FocusInputs | None
    metric: dict | None = Field(
        description="by=edges: {position, target, contrast, clean, corrupted} (tokens as "
        "shown); by=weights: {baseline: {q, k, v}, seconds} (the random heads' mean score "
        "each edge is less, and what the model's scores took once)"
    )
    convention: str
