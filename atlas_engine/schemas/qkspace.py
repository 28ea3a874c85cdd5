"""Schemas of POST /api/attention/qkspace: queries and keys of one head (or every head of a
layer) drawn together in 2-D."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from atlas_engine.schemas.attention import EXAMPLE_TEXT, TextRequest
from atlas_engine.schemas.common import Index, json_int

MAX_STRONGEST = 8


class QKSpaceRequest(TextRequest):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "sentence-transformers/all-MiniLM-L6-v2",
                    "text": EXAMPLE_TEXT,
                    "layer": 2,
                    "head": 3,
                    "method": "pca",
                }
            ]
        }
    )

    layer: Index
    head: Index | None = Field(
        None, description="One head; null for every head of the layer (small multiples)."
    )
    method: Literal["pca", "umap"] = Field(
        "pca",
        description="pca: exact, from the SVD; umap: needs the optional umap-learn package "
        "(GET /api/models says whether this server has it; 422 otherwise).",
    )
    strongest: json_int(ge=1, le=MAX_STRONGEST) = Field(
        3, description="For each query, this many keys it attends to most, with their weights."
    )


class HeadSpace(BaseModel):
    head: int
    kv_head: int = Field(description="The key/value head this query head reads (GQA)")
    queries: list[list[float]] = Field(description="(seq, 2): each token's query in the plane")
    keys: list[list[float]] = Field(description="(seq, 2): each token's key in the plane")
    explained: list[float] | None = Field(
        description="PCA: the share of the joint variance on each axis; UMAP: null"
    )
    query_scale: float = Field(
        gt=0, description="Queries were multiplied by this and keys divided by it"
    )
    strongest: list[list[int]] = Field(
        description="[query][rank]: the keys each query attends to most, strongest first; "
        "only keys the query may read (a causal query's row 3 lists at most 4)"
    )
    strongest_weights: list[list[float]] = Field(
        description="[query][rank]: their weights, from the model's own attention output"
    )


class QKSpaceResponse(BaseModel):
    model: str
    tokens: list[str]
    special_tokens: list[bool]
    causal: bool
    layer: int
    method: Literal["pca", "umap"]
    heads: list[HeadSpace]
