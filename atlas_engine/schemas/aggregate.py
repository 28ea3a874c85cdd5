"""Schemas of POST /api/attention/aggregate and POST /api/attention/similarity."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import (
    EXAMPLE_TEXT,
    AttentionResponse,
    LayerList,
    MapsFormat,
    TextRequest,
)
from atlas_engine.schemas.common import FiniteFloat


class AggregateRequest(TextRequest):
    """One map per requested layer, summing up all of that layer's heads."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "sentence-transformers/all-MiniLM-L6-v2",
                    "text": EXAMPLE_TEXT,
                    "kind": "rollout",
                    "layers": [5],
                    "format": "f32",
                }
            ]
        }
    )

    kind: Literal["average", "rollout"] = Field(
        description="average: the mean of the layer's heads. rollout (Abnar & Zuidema, 2020): "
        "heads averaged, mixed with the identity for the residual path, rows renormalised and "
        "multiplied through the layers up to this one; row i says how much token i holds of "
        "every input token after the layer."
    )
    residual: FiniteFloat = Field(
        0.5,
        ge=0,
        le=1,
        description="Rollout only: the identity's share, A' = r*I + (1-r)*A (0.5 in the paper).",
    )
    layers: LayerList | None = Field(None, description="Which layers (all by default).")
    format: MapsFormat = Field(
        "json",
        description="As POST /api/attention. Rollout spreads weight thinly over many tokens: "
        "f32 or json keep it exact; u8's 1/510 is coarse next to 1/seq.",
    )


class AggregateResponse(AttentionResponse):
    """attentions[i][0][q][k]: the aggregate map of layers[i] (one 'head', `heads` is [])."""

    kind: Literal["average", "rollout"]
    residual: float | None = Field(description="the rollout's identity share; null for average")


class SimilarityRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "text": EXAMPLE_TEXT}]
        }
    )


class SimilarityResponse(BaseModel):
    """similarity[a][b] for heads a, b numbered layer * num_heads + head (1 on the diagonal,
    symmetric), rounded to 4 decimals; `order` lists the heads so that alike heads sit side
    by side."""

    model: str
    tokens: list[str]
    num_layers: int
    num_heads: int
    num_kv_heads: int
    measure: str = Field(description="how two heads are compared")
    exact: bool = Field(description="True when no rows were sampled and no keys binned")
    rows_compared: int = Field(description="query rows compared (evenly spaced)")
    key_bins: int = Field(description="contiguous key bins each row is summed into")
    similarity: list[list[float]]
    order: list[int] = Field(description="head numbers in cluster order")
    compute_ms: float
